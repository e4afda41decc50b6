"""Kind 2, verify alignment.

Draft i is judged against the target distribution of the prefix that ends just before it;
each round commits 1…γ+1 tokens; the accepted count is the leading run of acceptances.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from lossless import FakeLM, FixedQDrafter, V, events_of, hashed_logits, model_drafter, ref_warp

from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent, TokenEvent, TokenKind
from specchat.core.sampling import verify_draft
from specchat.drafters import NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.6, 3, 1.0), (1.0, 0, 0.7), (0.0, 0, 1.0)])
def test_reported_target_prob_is_p_of_the_exact_prefix(temperature, top_k, top_p):
    fn_t = hashed_logits(V, seed=4, scale=3.0)
    target = FakeLM(V, fn_t)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=5, scale=3.0)), V)
    engine = SpeculativeEngine(TransformersRuntime(target), None)
    prompt = [2, 3]
    for seed in range(5):
        events = events_of(
            engine,
            prompt,
            drafter,
            num_speculative_tokens=3,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            max_new_tokens=20,
        )
        ids = list(prompt)
        pending = []
        for e in events:
            if isinstance(e, TokenEvent):
                p = ref_warp(fn_t(ids), temperature, top_k, top_p)
                assert e.target_prob == pytest.approx(float(p[e.token_id]), abs=1e-5)
                assert e.target_prob > 0  # p(x) = 0 is never emitted
                if e.kind is TokenKind.RESAMPLED:
                    assert e.rejected_target_prob == pytest.approx(float(p[e.rejected_token_id]), abs=1e-5)
                ids.append(e.token_id)
                pending.append(e)
            elif isinstance(e, RoundEvent):
                # 1..γ+1 tokens a round, accepted = leading run, positions 0..n-1
                assert 1 <= e.num_committed <= e.num_drafted + 1 <= 4
                assert [t.position for t in pending] == list(range(len(pending)))
                kinds = [t.kind for t in pending]
                assert kinds == [TokenKind.ACCEPTED] * e.num_accepted + [
                    TokenKind.TARGET if e.num_drafted == 0 else
                    TokenKind.BONUS if e.num_accepted == e.num_drafted else TokenKind.RESAMPLED
                ]
                assert all(e.accepted_mask[: e.num_accepted]) and (
                    e.num_accepted == e.num_drafted or not e.accepted_mask[e.num_accepted]
                )
                pending = []


def test_leading_run_only(fixed_u):
    # accept, reject, accept → num_accepted = 1 even though position 2 passed the test
    fixed_u([0.0, 0.99, 0.0])
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5], [1.0, 0.0], [1.0, 0.0]])
    draft = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    res = verify_draft(torch.tensor([0, 0, 0]), draft, target, None)
    assert res.num_accepted == 1
    assert res.accepted_mask == (True, False, True)
    assert res.next_kind is TokenKind.RESAMPLED and res.next_token_id == 1


def test_each_draft_is_judged_with_its_own_q_row(fixed_u):
    """Hand-made: drafts [0, 0]; q rows [.5,.5] then [1, 0]; p = [.5,.5] everywhere; u = .9, .9.
    Position 0: .9·.5 < .5 accepts; position 1: .9·1 < .5 rejects. So exactly 1 accepted."""
    fixed_u([0.9, 0.9])
    p = torch.full((3, 2), 0.5)
    q = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    res = verify_draft(torch.tensor([0, 0]), q, p, None)
    assert res.num_accepted == 1 and res.next_kind is TokenKind.RESAMPLED


def test_the_residual_uses_the_rejected_positions_q_row(fixed_u):
    """Hand-made: drafts [0, 1]; q rows one-hot [1,0] then [0,1]; p = [.5,.5]; u = 0, .99.
    Position 1 rejects; its residual is max(0, [.5,.5] − [0,1]) = [.5, 0] → token 0 surely."""
    fixed_u([0.0, 0.99])
    p = torch.full((3, 2), 0.5)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    res = verify_draft(torch.tensor([0, 1]), q, p, None)
    assert res.num_accepted == 1 and res.next_kind is TokenKind.RESAMPLED and res.next_token_id == 0


def test_events_report_the_q_of_their_own_tokens():
    """A drafter with a known fixed q at T=1: accepted tokens carry q(token), resampled ones
    carry q(rejected draft)."""
    q = [0.3, 0.1, 0.2, 0.1, 0.2, 0.1]
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=11, scale=2.0))), None)
    seen = Counter()
    for seed in range(20):
        for e in events_of(
            engine, [3, 1], FixedQDrafter(q), num_speculative_tokens=3, temperature=1.0, seed=seed, max_new_tokens=8
        ):
            if isinstance(e, TokenEvent) and e.kind is TokenKind.ACCEPTED:
                assert e.draft_prob == pytest.approx(q[e.token_id], abs=1e-6)
                seen["accepted"] += 1
            elif isinstance(e, TokenEvent) and e.kind is TokenKind.RESAMPLED:
                assert e.rejected_draft_prob == pytest.approx(q[e.rejected_token_id], abs=1e-6)
                seen["resampled"] += 1
    assert seen["accepted"] > 5 and seen["resampled"] > 5


def test_one_hot_q_rejections_report_the_rejected_drafts_p():
    """n-gram drafts (q one-hot) at T=1: a resampled token reports p of the rejected draft
    under the exact prefix (the residual must not overwrite p in place)."""
    fn = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn)), None)
    prompt = [3, 1, 4, 1, 5, 3, 1, 4]
    rejections = 0
    for seed in range(20):
        ids = list(prompt)
        for e in events_of(
            engine, prompt, NgramDrafter(), num_speculative_tokens=3, temperature=1.0, seed=seed, max_new_tokens=8
        ):
            if isinstance(e, TokenEvent):
                if e.kind is TokenKind.RESAMPLED:
                    p = ref_warp(fn(ids), 1.0)
                    assert e.rejected_target_prob == pytest.approx(float(p[e.rejected_token_id]), abs=1e-5)
                    rejections += 1
                ids.append(e.token_id)
    assert rejections > 3
