"""On a CUDA GPU: exactness and the drafter fallback (``scripts/gpu_check.sh`` runs these).

Skipped where torch sees no CUDA device. What they check, on the GPU:
* greedy replies with every drafter SmolLM2-135M offers (the NF4 copy quantized by bitsandbytes
  on the GPU included) are token-identical to target-only;
* a chi-square of sampled replies (tiny random transformers, T = 0.8, top-k 5) against the
  exact target distribution computed on the CPU from first principles;
* a drafter that runs out of GPU memory mid-reply is dropped and the reply is finished by the
  target alone, identical to target-only.
"""

from __future__ import annotations

import copy

import pytest
import torch
from lossless import assert_matches, exact_sequences, run_many
from tiny_models import tiny_model

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent, DrafterFailedEvent
from specchat.drafters.model import ModelDrafter
from specchat.runtimes.transformers import TransformersRuntime

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh)"),
]

PROMPTS = ("Write a Python function that checks whether a string is a palindrome.",
           "Explain in two sentences what a hash map is.")


@pytest.fixture(scope="module")
def service(smollm2_dir):
    from specchat.service import ChatService

    svc = ChatService(target="smollm2-135m-instruct", dtype="float32", device="cuda")
    svc.load()
    return svc


def reply(service, message: str, drafter: str, **cfg) -> DoneEvent:
    config = GenerationConfig(**{"num_speculative_tokens": 4, "max_new_tokens": 48, **cfg})
    events = list(service.stream_chat([], message, drafter=drafter, config=config))
    assert isinstance(events[-1], DoneEvent)
    return events[-1]


@pytest.mark.real_model
def test_greedy_identity_on_cuda_for_every_drafter(service):
    assert service.device.type == "cuda" and next(service.engine.target.model.parameters()).is_cuda
    kinds = [k for k in service.drafter_kinds() if k != "none"]
    assert {"ngram", "int4", "hybrid"} <= set(kinds)
    for message in PROMPTS:
        expected = reply(service, message, "none").token_ids
        for kind in kinds:
            for adaptive in (False, True):
                done = reply(service, message, kind, adaptive_gamma=adaptive, measure_speedup=adaptive)
                assert done.token_ids == expected, (kind, adaptive, message)


def test_sampled_replies_follow_the_exact_target_distribution_on_cuda():
    vocab = 6
    target_cpu = tiny_model(vocab_size=vocab, seed=31, init_std=0.2)
    drafter_cpu = tiny_model(vocab_size=vocab + 2, seed=32, init_std=0.2, family="qwen2")

    @torch.inference_mode()
    def fn(ids):
        return target_cpu(torch.tensor([ids])).logits[0, -1]

    prompt = [1, 2]
    exact = exact_sequences(fn, prompt, 3, temperature=0.8, top_k=5)
    engine = SpeculativeEngine(TransformersRuntime(copy.deepcopy(target_cpu).to("cuda")), None, eos_token_ids=[])
    drafter = ModelDrafter(TransformersRuntime(copy.deepcopy(drafter_cpu).to("cuda")), target_vocab_size=vocab, num_tokenizer_ids=vocab,
                           name="sib")
    n = 1500
    counts = run_many(engine, prompt, drafter, n, num_speculative_tokens=3, temperature=0.8, top_k=5, max_new_tokens=3)
    assert_matches(counts, exact, n, alpha=1e-3)


@pytest.mark.real_model
@pytest.mark.drafter_failure
def test_cuda_out_of_memory_in_the_drafter_falls_back_to_target_only(service, monkeypatch):
    expected = reply(service, PROMPTS[0], "none").token_ids
    service.prepare_drafter("int4")
    drafter_model = service._drafters["int4"].runtime.model
    calls = {"n": 0}
    real_forward = drafter_model.forward

    def forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(drafter_model, "forward", forward)
    config = GenerationConfig(num_speculative_tokens=4, max_new_tokens=48)
    events = list(service.stream_chat([], PROMPTS[0], drafter="int4", config=config))
    failed = [e for e in events if isinstance(e, DrafterFailedEvent)]
    assert len(failed) == 1 and failed[0].error.startswith("OutOfMemoryError: CUDA out of memory")
    assert events[-1].token_ids == expected
