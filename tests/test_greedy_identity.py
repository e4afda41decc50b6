"""Greedy identity: speculative output equals target-only greedy, token for token (fp32).

Every drafter, γ ∈ {1, 2, 4, 8}, on prompts where the drafter is mostly right and mostly wrong;
a scripted drafter right for k tokens then wrong, for every k ≤ γ (deterministic partial
acceptance). The reference is a naive loop that runs the target on the whole sequence each step.
"""

from __future__ import annotations

import pytest
import torch
from lossless import (
    TINY_PROMPT,
    TINY_VOCAB,
    FakeLM,
    ScriptDrafter,
    StatelessDrafter,
    V,
    events_of,
    hashed_logits,
    naive_greedy,
    naive_greedy_fn,
)

from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent, TokenEvent, TokenKind
from specchat.drafters import Draft, ModelDrafter, NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime


class ScriptedDrafter(StatelessDrafter):
    """Proposes the reference continuation for k tokens, then a wrong token; checks caches."""

    name = "scripted"

    def __init__(self, engine, reference, k):
        self.engine, self.reference, self.k = engine, reference, k
        self.prompt_len = 0
        self.requests = []

    def begin(self, prompt_ids):
        self.prompt_len = len(prompt_ids)

    def propose(self, ids, max_tokens, config, generator):
        # bookkeeping: the target cache holds exactly the committed tokens but the last
        assert self.engine.target.cache.get_seq_length() == len(ids) - 1
        self.requests.append(max_tokens)
        done = len(ids) - self.prompt_len
        ref = self.reference[done : done + max_tokens]
        out = ref[: self.k]
        if len(out) < max_tokens and len(ref) > self.k:
            out = out + [(ref[self.k] + 1) % TINY_VOCAB]
        out = out + [0] * (max_tokens - len(out))
        return Draft(torch.tensor(out[:max_tokens]), None, 0)


def test_target_only_matches_naive_loop(engine, reference):
    done = events_of(engine, TINY_PROMPT, None, max_new_tokens=40)[-1]
    assert list(done.token_ids) == reference
    assert all(k is TokenKind.TARGET for k in done.kinds)  # no draft: every token is the target's own


# -- every drafter × γ × (mostly right, mostly wrong) ------------------------------------------
# A case names a drafter and a setting where it is mostly right or mostly wrong; the test
# measures the acceptance rate (accepted / drafted) and fails if the case is not in its regime,
# so "mostly wrong" really exercises rejections and "mostly right" long multi-token commits.
COPY_PROMPT = [5, 9, 2, 14, 7, 11, 3, 12, 8, 1, 13, 4, 5, 9, 2]  # period 12; ends inside its 2nd period


def copy_logits(vocab: int, period: int):
    """A FakeLM target that repeats its context with ``period`` (decisive logit 6 over noise ≤ 1)."""
    noise = hashed_logits(vocab, seed=77, scale=1.0)

    def fn(prefix):
        out = noise(prefix)
        out[prefix[-period]] += 6.0
        return out

    return fn


@pytest.fixture(scope="module")
def int4_case(tmp_path_factory):
    """An NF4 (bitsandbytes) copy of a tiny target, loaded by specchat.runtimes.loading like the app's int4 drafter.

    bitsandbytes' CPU kernels need a hidden size of at least its block size (64). On random
    weights the quantization noise flips most argmaxes: a mostly-wrong int4 drafter.
    """
    pytest.importorskip("bitsandbytes")
    from tiny_models import tiny_model

    from specchat.runtimes import loading

    target = tiny_model(vocab_size=TINY_VOCAB, seed=0, hidden_size=64)
    path = tmp_path_factory.mktemp("int4")
    loading._save_model_files(target, path)
    quantized = loading.load_model(path, dtype=torch.float32, int4=True)
    return target, quantized


def grid_case(case, target, other, int4_case):
    """(target model, drafter, prompt, naive-greedy function) for one case name."""
    if case in ("self-right", "sibling-wrong"):
        model = target if case == "self-right" else other
        drafter = ModelDrafter(TransformersRuntime(model), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name=case)
        return target, drafter, TINY_PROMPT
    if case == "int4-wrong":
        tgt, quantized = int4_case
        return (
            tgt,
            ModelDrafter(TransformersRuntime(quantized), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="int4"),
            TINY_PROMPT,
        )
    if case == "ngram-right":
        return FakeLM(16, copy_logits(16, 12)), NgramDrafter(), COPY_PROMPT
    return FakeLM(64, hashed_logits(64, seed=78, scale=4.0)), NgramDrafter(), COPY_PROMPT


GRID = {
    "self-right": (0.9, 1.0),
    "sibling-wrong": (0.0, 0.2),
    "int4-wrong": (0.0, 0.4),
    "ngram-right": (0.9, 1.0),
    "ngram-wrong": (0.0, 0.4),
}


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("case", list(GRID))
def test_greedy_identity_every_drafter(target, other, int4_case, case, gamma):
    model, drafter, prompt = grid_case(case, target, other, int4_case)
    if isinstance(model, FakeLM):
        reference = naive_greedy_fn(model.logits_fn, prompt, 40)
    else:
        reference = naive_greedy(model, prompt, 40)
    engine = SpeculativeEngine(TransformersRuntime(model), None, eos_token_ids=[])
    events = events_of(engine, prompt, drafter, num_speculative_tokens=gamma, max_new_tokens=40)
    assert list(events[-1].token_ids) == reference
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    drafted = sum(r.num_drafted for r in rounds)
    rate = sum(r.num_accepted for r in rounds) / drafted
    lo, hi = GRID[case]
    assert drafted >= 10 and lo <= rate <= hi, f"{case}: {drafted} drafted, accepted/drafted {rate:.2f}"


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_scripted_partial_acceptance(engine, reference, gamma):
    """A drafter right for exactly k tokens then wrong, for every k <= γ: each round accepts k."""
    for k in range(gamma + 1):
        drafter = ScriptedDrafter(engine, reference, k)
        events = events_of(engine, TINY_PROMPT, drafter, num_speculative_tokens=gamma, max_new_tokens=30)
        assert list(events[-1].token_ids) == reference[:30]
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        for r in rounds[:-1]:  # the last round may be cut by the budget
            assert r.num_accepted == min(k, r.num_drafted)
            assert r.num_committed == r.num_accepted + 1
            kinds = [t.kind for t in tokens if t.round_index == r.round_index]
            last = (TokenKind.TARGET if r.num_drafted == 0 else
                    TokenKind.BONUS if k >= r.num_drafted else TokenKind.RESAMPLED)
            assert kinds == [TokenKind.ACCEPTED] * r.num_accepted + [last]
        assert all(n <= 30 - 1 for n in drafter.requests)


def test_drafter_returning_fewer_or_zero_tokens_greedy_identity():
    fn_t = hashed_logits(V, seed=6, scale=4.0)
    ref = naive_greedy_fn(fn_t, [1, 2], 25)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    for n in (0, 1, 2):
        drafter = ScriptDrafter(ref, 2, n=n)
        events = events_of(engine, [1, 2], drafter, num_speculative_tokens=5, max_new_tokens=25)
        assert list(events[-1].token_ids) == ref
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert all(r.num_drafted <= n and r.num_committed == r.num_drafted + 1 for r in rounds[:-1])
