"""Kind 8, numerical non-invariance.

Verifying γ+1 positions in one pass may use different kernels than one-token decoding. Exact
equality is asserted in fp32; in bf16 a divergence is allowed only right after a near-tie of the
target's top two logits, and the gap is measured.
"""

from __future__ import annotations

import pytest
import torch
from lossless import TOK, FakeLM, TinyService, V, events_of, hashed_logits, naive_greedy, naive_greedy_fn
from tiny_models import tiny_model

from specchat.analysis import audit
from specchat.core.engine import SpeculativeEngine
from specchat.core.sampling import logits_to_probs
from specchat.drafters import ModelDrafter, NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_fp32_greedy_identity_tiny_transformers_vs_naive_loop(family):
    vocab = 257
    tgt = tiny_model(vocab_size=vocab, seed=30, family=family)
    prompt = list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n")
    ref = naive_greedy(tgt, prompt, 40)
    engine = SpeculativeEngine(TransformersRuntime(tgt), TOK)
    drafters = [
        ModelDrafter(TransformersRuntime(tiny_model(vocab_size=300, seed=31)), target_vocab_size=vocab, num_tokenizer_ids=vocab, name="s"),
        ModelDrafter(TransformersRuntime(tgt), target_vocab_size=vocab, num_tokenizer_ids=vocab, name="self"),
        NgramDrafter(),
    ]
    for drafter in drafters:
        for gamma in (2, 7):
            done = events_of(engine, prompt, drafter, num_speculative_tokens=gamma, max_new_tokens=40)[-1]
            assert list(done.token_ids) == ref


def test_bf16_greedy_divergence_only_at_near_ties(record_property):
    """bf16: a batched verify pass may round differently from one-token steps, so the greedy
    reply may differ from target-only decoding, but only right after a position where the
    target's top two logits tie to within 2 bf16 epsilons (audit.tie_tolerance).

    12 tiny bf16 models with small weights (many near-ties), the target drafting for itself
    (γ = 6, every draft accepted, long verify passes). On this machine's AVX-512 CPU 3 of the 12
    diverge, each at a gap of 0 or 1 bf16 ulp; the gaps are reported as the property
    ``bf16_divergences``. Skipped where no model diverges (nothing to check).
    """
    vocab = 257
    prompt = list(b"the quick brown fox jumps over the lazy dog; the quick brown fox ")
    divergences = []
    for seed in range(40, 52):
        tgt = tiny_model(vocab_size=vocab, seed=seed, dtype=torch.bfloat16, init_std=0.02, hidden_size=64, num_layers=4)
        engine = SpeculativeEngine(TransformersRuntime(tgt), None)
        base = list(events_of(engine, prompt, None, max_new_tokens=60)[-1].token_ids)
        drafter = ModelDrafter(TransformersRuntime(tgt), target_vocab_size=vocab, num_tokenizer_ids=vocab, name="self")
        spec = list(events_of(engine, prompt, drafter, num_speculative_tokens=6, max_new_tokens=60)[-1].token_ids)
        i = next((k for k, (a, b) in enumerate(zip(base, spec)) if a != b), None)
        if i is None:
            continue
        with torch.inference_mode():
            logits = tgt(torch.tensor([prompt + base[:i]])).logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        gap, tolerance = float(top2[0] - top2[1]), audit.tie_tolerance(torch.bfloat16, float(top2[0]))
        divergences.append((seed, i, gap, tolerance))
    record_property("bf16_divergences", divergences)
    if not divergences:
        pytest.skip("no bf16 divergence on this CPU: nothing to check")
    for seed, i, gap, tolerance in divergences:
        assert gap <= tolerance, f"seed {seed}: divergence at token {i} with a top-2 gap {gap} > {tolerance}"


# -- the audit's divergence report: the gap is measured where the outputs first differ ---------
def test_first_divergence_reports_the_targets_top_two_gap_there():
    fn = hashed_logits(V, seed=5, scale=3.0)
    prompt = [1, 2, 3]
    reference = naive_greedy_fn(fn, prompt, 12)
    other = list(reference)
    other[7] = (other[7] + 1) % V
    other[9] = (other[9] + 1) % V  # a later difference must not matter
    div = audit.first_divergence(FakeLM(V, fn), prompt, reference, other)
    logits = fn(prompt + reference[:7]).double()
    top = torch.topk(logits, 2)
    assert div.index == 7 and div.target_only_token == reference[7] and div.speculative_token == other[7]
    assert div.top_tokens == (int(top.indices[0]), int(top.indices[1]))
    assert div.gap == pytest.approx(float(top.values[0] - top.values[1]), abs=1e-6)
    assert audit.first_divergence(FakeLM(V, fn), prompt, reference, reference[:5]) is None


def test_tie_tolerance_scales_with_the_dtype():
    # bf16 eps 2^-7: 2 eps at a logit of 19.5 is 0.3047; float32 hits the 1e-3 floor
    assert audit.tie_tolerance(torch.bfloat16, 19.5) == pytest.approx(2 * 2**-7 * 19.5)
    assert audit.tie_tolerance(torch.float32, 19.5) == 1e-3
    assert audit.tie_tolerance(torch.bfloat16, -0.01) == 1e-3


def test_greedy_audit_fails_with_the_gap_when_verification_is_broken(monkeypatch):
    """Break verification on purpose (accept every draft): the greedy check must report a
    divergence whose gap is a clear margin, not a near-tie."""
    import specchat.core.engine as engine_module
    from specchat.core.events import TokenKind
    from specchat.core.sampling import VerifyResult, sample

    def accept_all(draft_ids, draft_probs, target_probs, generator):
        n = int(draft_ids.shape[0])
        return VerifyResult(n, (True,) * n, sample(target_probs[n], generator), TokenKind.BONUS)

    fn = hashed_logits(V, seed=6, scale=4.0)
    service = TinyService(FakeLM(V, fn), FakeLM(V, hashed_logits(V, seed=7, scale=4.0)), V)
    assert audit.greedy_check(service, [1, 2], "other", 20)[2] is None
    monkeypatch.setattr(engine_module, "verify_draft", accept_all)
    reference, other, div = audit.greedy_check(service, [1, 2], "other", 20)
    assert div is not None and reference != other
    assert not div.is_near_tie(audit.tie_tolerance(torch.float32, div.top_logits[0]))
    assert div.gap == pytest.approx(
        float(torch.topk(fn([1, 2] + reference[: div.index]), 2).values.diff().abs()), abs=1e-5
    )


def test_tie_tolerance_uses_the_magnitude_of_a_negative_logit():
    assert audit.tie_tolerance(torch.bfloat16, -19.5) == pytest.approx(2 * 2**-7 * 19.5)


def test_probabilities_are_float32_and_normalised_whatever_the_logits_dtype():
    """bf16 logits (a bf16 model) are warped in float32: rows of p sum to 1 within float32
    rounding, so min(p, q) + residual = p holds to 1e-6, not to bf16's 4e-3."""
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    p = logits_to_probs(logits, temperature=0.7, top_k=10)
    assert p.dtype == torch.float32 and torch.allclose(p.sum(-1), torch.ones(3), atol=1e-6)
