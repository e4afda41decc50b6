"""Kind 2, verify alignment.

Draft i is judged against the target distribution of the prefix that ends just before it;
each round commits 1…γ+1 tokens; the accepted count is the leading run of acceptances.
"""

from __future__ import annotations

import pytest
import torch
from lossless import FakeLM, V, events_of, hashed_logits, model_drafter, ref_warp

from specchat.engine import SpeculativeEngine
from specchat.events import RoundEvent, TokenEvent, TokenKind
from specchat.sampling import verify_draft


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.6, 3, 1.0), (1.0, 0, 0.7), (0.0, 0, 1.0)])
def test_reported_target_prob_is_p_of_the_exact_prefix(temperature, top_k, top_p):
    fn_t = hashed_logits(V, seed=4, scale=3.0)
    target = FakeLM(V, fn_t)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=5, scale=3.0)), V)
    engine = SpeculativeEngine(target, None)
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
                    TokenKind.BONUS if e.num_accepted == e.num_drafted else TokenKind.RESAMPLED
                ]
                assert all(e.accepted_mask[: e.num_accepted]) and (
                    e.num_accepted == e.num_drafted or not e.accepted_mask[e.num_accepted]
                )
                pending = []


@pytest.fixture
def fixed_u(monkeypatch):
    """verify_draft draws u with torch.rand; make it return the given values."""

    def install(values):
        real_rand = torch.rand

        def fake_rand(n, generator=None, device=None):
            assert n == len(values)
            return torch.tensor(values, dtype=torch.float32)

        monkeypatch.setattr(torch, "rand", fake_rand)
        return real_rand

    return install


def test_leading_run_only(fixed_u):
    # accept, reject, accept → num_accepted = 1 even though position 2 passed the test
    fixed_u([0.0, 0.99, 0.0])
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5], [1.0, 0.0], [1.0, 0.0]])
    draft = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    res = verify_draft(torch.tensor([0, 0, 0]), draft, target, None)
    assert res.num_accepted == 1
    assert res.accepted_mask == (True, False, True)
    assert res.next_kind is TokenKind.RESAMPLED and res.next_token_id == 1
