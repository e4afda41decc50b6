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
    V,
    events_of,
    hashed_logits,
    naive_greedy_fn,
)

from specchat.drafters import Draft, ModelDrafter, NgramDrafter
from specchat.engine import SpeculativeEngine
from specchat.events import RoundEvent, TokenKind


class ScriptedDrafter:
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
        assert self.engine.target_cache.get_seq_length() == len(ids) - 1
        self.requests.append(max_tokens)
        done = len(ids) - self.prompt_len
        ref = self.reference[done : done + max_tokens]
        out = ref[: self.k]
        if len(out) < max_tokens and len(ref) > self.k:
            out = out + [(ref[self.k] + 1) % TINY_VOCAB]
        out = out + [0] * (max_tokens - len(out))
        return Draft(torch.tensor(out[:max_tokens]), None, 0)

    def rollback(self, num_valid):
        pass

    def end(self):
        pass


def test_target_only_matches_naive_loop(engine, reference):
    done = events_of(engine, TINY_PROMPT, None, max_new_tokens=40)[-1]
    assert list(done.token_ids) == reference
    assert all(k is TokenKind.BONUS for k in done.kinds)


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", ["self", "other", "ngram"])
def test_greedy_identity_every_drafter(engine, target, other, reference, kind, gamma):
    model = {"self": target, "other": other}.get(kind)
    drafter = (
        NgramDrafter()
        if kind == "ngram"
        else ModelDrafter(model, target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name=kind)
    )
    done = events_of(engine, TINY_PROMPT, drafter, num_speculative_tokens=gamma, max_new_tokens=40)[-1]
    assert list(done.token_ids) == reference
    if kind == "self":  # the target drafting for itself is always right
        assert sum(k is TokenKind.ACCEPTED for k in done.kinds) >= 40 * gamma // (gamma + 1) - gamma


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_scripted_partial_acceptance(engine, reference, gamma):
    for k in range(gamma + 1):
        drafter = ScriptedDrafter(engine, reference, k)
        events = events_of(engine, TINY_PROMPT, drafter, num_speculative_tokens=gamma, max_new_tokens=30)
        assert list(events[-1].token_ids) == reference[:30]
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        for r in rounds[:-1]:  # the last round may be cut by the budget
            assert r.num_accepted == min(k, r.num_drafted)
            expected_kind = TokenKind.BONUS if k >= r.num_drafted else TokenKind.RESAMPLED
            assert r.num_committed == r.num_accepted + 1
        assert all(n <= 30 - 1 for n in drafter.requests)


def test_drafter_returning_fewer_or_zero_tokens_greedy_identity():
    fn_t = hashed_logits(V, seed=6, scale=4.0)
    ref = naive_greedy_fn(fn_t, [1, 2], 25)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    for n in (0, 1, 2):
        drafter = ScriptDrafter(ref, 2, n=n)
        events = events_of(engine, [1, 2], drafter, num_speculative_tokens=5, max_new_tokens=25)
        assert list(events[-1].token_ids) == ref
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert all(r.num_drafted <= n and r.num_committed == r.num_drafted + 1 for r in rounds[:-1])
