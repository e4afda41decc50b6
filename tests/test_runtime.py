"""The runtime seam (specchat.core.runtime.ModelRuntime): the contract every runtime must keep,
checked on each runtime (transformers; llama.cpp on the same weights written as an F32 GGUF,
when llama-cpp-python is installed) against the model's own full-sequence forward pass
(no cache): logits of a cached pass equal the uncached logits of the same positions, a cut
cache continues as if the cut tokens had never been fed, and a kept prefix is reused exactly as
far as its token ids match.

A new runtime passes this file by adding a factory to RUNTIMES."""

from __future__ import annotations

import pytest
import torch
from tiny_gguf import write_gguf
from tiny_models import tiny_model

from specchat.core.runtime import CacheRollbackError, ModelRuntime, common_prefix
from specchat.runtimes import llamacpp
from specchat.runtimes.transformers import TransformersRuntime

VOCAB = 61


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=VOCAB, seed=7, family="qwen2")  # a family llama.cpp runs without permuting Q/K


def full_logits(model, ids: list[int]) -> torch.Tensor:
    """``[len(ids), V]`` float32 logits of the whole sequence, no cache: the reference."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def llamacpp_runtime(model, directory):
    if llamacpp.unavailable_reason():
        pytest.skip(llamacpp.unavailable_reason())
    return llamacpp.LlamaCppRuntime(write_gguf(model, directory / "tiny.gguf"), precise=True)


RUNTIMES = {
    "transformers": lambda model, directory: TransformersRuntime(model),
    "llamacpp": llamacpp_runtime,
}


@pytest.fixture(params=sorted(RUNTIMES))
def runtime(request, model, tmp_path) -> ModelRuntime:
    return RUNTIMES[request.param](model, tmp_path)


def test_it_is_a_model_runtime_with_the_models_metadata(runtime, model):
    assert isinstance(runtime, ModelRuntime)
    assert runtime.vocab_size == VOCAB and runtime.num_input_ids == VOCAB
    assert runtime.context_length == model.config.max_position_embeddings
    assert runtime.num_cached == 0 and runtime.cached_ids == ()
    size = runtime.model_size()
    # 2 layers × (q, k, v, o, gate, up, down) + the LM head (hidden 32, kv 2 of 4 heads, mlp 64), and
    # Qwen2's q, k, v biases (32 + 16 + 16)
    per_layer = 32 * 32 + 2 * (32 * 16) + 32 * 32 + 3 * (32 * 64) + 32 + 2 * 16
    assert size.matmul_params == 2 * per_layer + 32 * VOCAB and size.weight_bytes == 4 * size.matmul_params


def test_cached_passes_give_the_full_sequence_logits(runtime, model):
    ids = [5, 9, 2, 33, 17, 8, 40, 1, 12]
    reference = full_logits(model, ids)
    with torch.inference_mode():
        assert runtime.start(ids[:4], max_positions=32) == 0
        assert runtime.forward(ids[:4], num_logits=0) is None  # a prefill: no logits
        verify = runtime.forward(ids[4:8], num_logits=4)  # a verify pass scores every position
        step = runtime.forward(ids[8:], num_logits=1)
    assert verify.dtype == torch.float32 and tuple(verify.shape) == (4, VOCAB)
    torch.testing.assert_close(verify, reference[4:8], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, reference[8:], rtol=1e-4, atol=1e-4)
    assert runtime.num_cached == len(ids) and runtime.cached_ids == tuple(ids)


def test_a_cut_cache_continues_as_if_the_cut_tokens_were_never_fed(runtime, model):
    prefix, rejected, other = [3, 14, 15, 9, 26], [5, 35, 8], [7, 9]
    with torch.inference_mode():
        runtime.start(prefix, max_positions=32)
        runtime.forward(prefix, num_logits=0)
        runtime.forward(rejected, num_logits=3)
        runtime.truncate(len(prefix) + 1)  # the first draft accepted, the rest rolled back
        assert runtime.num_cached == len(prefix) + 1 and runtime.cached_ids == tuple(prefix + rejected[:1])
        logits = runtime.forward(other, num_logits=2)
    reference = full_logits(model, prefix + rejected[:1] + other)
    torch.testing.assert_close(logits, reference[-2:], rtol=1e-4, atol=1e-4)
    runtime.truncate(runtime.num_cached)  # already that long: a no-op
    with pytest.raises(CacheRollbackError):
        runtime.truncate(runtime.num_cached + 1)
    with pytest.raises(CacheRollbackError):
        runtime.truncate(-1)


def test_start_keeps_exactly_the_common_prefix_of_the_cached_ids(runtime, model):
    """A cache of 6 positions for ids (1…6); a prompt (1, 2, 3, 9, 9) keeps 3 of them, and the
    pass after them equals the uncached logits; reuse=False keeps none; release empties it."""
    with torch.inference_mode():
        runtime.start([1, 2, 3, 4, 5, 6], max_positions=32)
        runtime.forward([1, 2, 3, 4, 5, 6], num_logits=0)
        kept = runtime.start([1, 2, 3, 9, 9], max_positions=32)
        assert kept == 3 and runtime.cached_ids == (1, 2, 3) and runtime.num_cached == 3
        logits = runtime.forward([9, 9], num_logits=2)
        torch.testing.assert_close(logits, full_logits(model, [1, 2, 3, 9, 9])[-2:], rtol=1e-4, atol=1e-4)
        assert runtime.start([1, 2, 3, 9, 9], max_positions=32, reuse=False) == 0 and runtime.num_cached == 0
        assert runtime.start([8, 1], max_positions=32) == 0  # nothing in common at position 0
    runtime.release()
    runtime.release()  # twice is fine
    assert runtime.num_cached == 0 and runtime.cached_ids == ()
    with pytest.raises(RuntimeError):
        runtime.forward([1], num_logits=1)  # released: start() first
    with pytest.raises(CacheRollbackError):
        runtime.truncate(2)


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0

