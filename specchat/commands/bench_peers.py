"""The benchmark's peers: the same models run by transformers' ``generate`` (assisted
generation, prompt lookup) and by llama.cpp itself through llama-cpp-python (its plain decode
and its prompt-lookup speculation), each one call per run, timed like specchat's runs (see
:mod:`specchat.commands.bench`), and the peak-memory sampler all runs share.
"""

from __future__ import annotations

import threading
import time

SPECCHAT, TRANSFORMERS, LLAMACPP = "specchat", "transformers", "llama.cpp"
# The n-gram drafter's counterparts: prompt lookup decoding with its documented example setting
# (transformers' docs and MODELS.md use 10; llama-cpp-python's LlamaPromptLookupDecoding the same).
PROMPT_LOOKUP_NUM_TOKENS = 10


class _PeakMemory:
    """Peak memory during a block: CUDA allocated (GPU) or process RSS sampled every 10 ms."""

    def __init__(self, device):
        self.device = device
        self.peak_mb = 0.0
        self._stop = threading.Event()

    def __enter__(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        import psutil

        process = psutil.Process()
        self.peak_mb = process.memory_info().rss / 2**20

        def sample():
            while not self._stop.wait(0.01):
                self.peak_mb = max(self.peak_mb, process.memory_info().rss / 2**20)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import torch

        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            self._stop.set()
            self._thread.join()
        return False


class _ChunkClock:
    """A transformers streamer that only records when each chunk of new tokens arrives."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.times: list[float] = []
        self.sizes: list[int] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate() first puts the prompt
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter() - self.t0)
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass


def transformers_kwargs(service, drafter: str) -> dict:
    """The ``generate`` arguments of transformers' counterpart of a specchat drafter.

    none → plain greedy; sibling / int4 / sibling-int4 → ``assistant_model=`` the same loaded
    drafter model (transformers' defaults: 20 assistant tokens with its confidence threshold);
    ngram → ``prompt_lookup_num_tokens=10``.
    """
    if drafter == "none":
        return {}
    if drafter == "ngram":
        return {"prompt_lookup_num_tokens": PROMPT_LOOKUP_NUM_TOKENS}
    return {"assistant_model": service.prepare_drafter(drafter).runtime.model}


def run_transformers(service, prompt_ids: list[int], config, max_new_tokens: int,
                     temperature: float = 0.0, seed: int = 0) -> dict:
    """One ``target_model.generate(...)`` call on the same loaded models (greedy, or sampled at
    ``temperature`` with torch's seed set to ``seed``)."""
    import torch
    from transformers import GenerationConfig as HFGenerationConfig

    engine = service.engine
    eos = sorted(engine.eos_token_ids)
    # an explicit config: greedy, no repetition penalty or sampling defaults from the model files
    kwargs = transformers_kwargs(service, config.drafter)
    sampled = temperature > 0
    gen_config = HFGenerationConfig(
        do_sample=sampled, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos[0],
        prompt_lookup_num_tokens=kwargs.pop("prompt_lookup_num_tokens", None),
        **({"temperature": temperature, "top_k": 0, "top_p": 1.0} if sampled else {}),
    )
    if sampled:
        torch.manual_seed(seed)
    if config.num_speculative_tokens is not None and "assistant_model" in kwargs:
        # tuned: a fixed number of assistant tokens per round (transformers' default is 20 with
        # its "heuristic" schedule, carried over between calls, and a confidence threshold of 0.4)
        gen_config.num_assistant_tokens = config.num_speculative_tokens
        gen_config.num_assistant_tokens_schedule = "constant"
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=engine.device)
    with _PeakMemory(service.device) as memory:
        clock = _ChunkClock()
        with torch.inference_mode():
            out = engine.target.model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_config,
                streamer=clock, **kwargs,
            )
        total_s = time.perf_counter() - clock.t0
    tokens = out[0, len(prompt_ids):].tolist()
    # generate() stops after an EOS but may pad nothing; cut at the first EOS like specchat
    for i, token in enumerate(tokens):
        if token in engine.eos_token_ids:
            tokens = tokens[: i + 1]
            break
    return dict(
        num_tokens=len(tokens), token_ids=tokens, ttft_s=clock.times[0] if clock.times else total_s,
        total_s=total_s, e2e_tokens_per_s=len(tokens) / total_s,
        prefill_s=None, decode_tokens_per_s=None,  # set from the paired specchat run (_fill_relative)
        num_rounds=len(clock.sizes), tokens_per_round=len(tokens) / max(len(clock.sizes), 1),
        peak_mem_mb=memory.peak_mb,
    )


def _llama(service, drafter: str, n_ctx: int):
    """llama-cpp-python's ``Llama`` on the target's GGUF, with the runtime's threads and flash
    attention on (what llama.cpp's default, auto, resolves to on a CPU), made once per kind:
    plain for ``none``, with its own prompt-lookup draft model for ``ngram``."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    cache = service.__dict__.setdefault("_bench_llama", {})
    key = (drafter, n_ctx)
    if key not in cache:
        draft = LlamaPromptLookupDecoding(num_pred_tokens=PROMPT_LOOKUP_NUM_TOKENS) if drafter == "ngram" else None
        cache[key] = llama_cpp.Llama(
            str(service.target_path), n_ctx=n_ctx, n_threads=service.engine.target.threads,
            n_threads_batch=service.engine.target.threads, flash_attn=True, draft_model=draft, verbose=False,
        )
    return cache[key]


def llamacpp_configs(drafters) -> list[str]:
    """The drafters llama.cpp itself has a counterpart for: none (its plain decode) and ngram
    (its prompt lookup). Its draft-model speculation (``llama-speculative``, ``llama-server
    --model-draft``) is not in llama-cpp-python's API."""
    return ["none"] + (["ngram"] if "ngram" in drafters else [])


def run_llamacpp(service, prompt_ids: list[int], config, max_new_tokens: int,
                 temperature: float = 0.0, seed: int = 0) -> dict:
    """One generation by llama.cpp itself (``Llama.generate``) on the same GGUF: greedy, or
    sampled at ``temperature`` (top-k, top-p and min-p off) with ``seed``. Its prefill is its
    own: the time to its first token; its decode rate counts the tokens after the first."""
    n_ctx = 256 * -(-(len(prompt_ids) + max_new_tokens + 16) // 256)
    llm = _llama(service, config.drafter, max(n_ctx, 1024))
    llm.set_seed(seed)
    eos = service.engine.eos_token_ids
    tokens: list[int] = []
    with _PeakMemory(service.device) as memory:
        t0 = time.perf_counter()
        first = None
        llm.reset()  # from an empty cache, like specchat's first turn (the multi-turn part keeps prefixes)
        for token in llm.generate(prompt_ids, temp=temperature, top_k=0, top_p=1.0, min_p=0.0, reset=True):
            if first is None:
                first = time.perf_counter() - t0
            tokens.append(int(token))
            if token in eos or len(tokens) >= max_new_tokens:
                break
        total_s = time.perf_counter() - t0
    first = first or total_s
    return dict(
        num_tokens=len(tokens), token_ids=tokens, ttft_s=first, total_s=total_s,
        e2e_tokens_per_s=len(tokens) / total_s, prefill_s=first,
        decode_tokens_per_s=(len(tokens) - 1) / (total_s - first) if len(tokens) > 1 and total_s > first else None,
        num_rounds=len(tokens), tokens_per_round=1.0, peak_mem_mb=memory.peak_mb,
    )
