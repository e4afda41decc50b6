"""Events: each round is 0…γ accepted tokens then exactly one resampled, bonus or target token
(target: the round drafted nothing), truncated only by a stop; the counts agree with the stats.
"""

from __future__ import annotations

import pytest
import torch
from lossless import (
    EOS_BYTE,
    TINY_PROMPT,
    TINY_VOCAB,
    TOK,
    FakeLM,
    ScriptDrafter,
    V,
    events_of,
    hashed_logits,
    make_drafter,
    script_logits,
)

from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import Draft, ModelDrafter
from specchat.runtimes.transformers import TransformersRuntime


def test_event_structure_and_counts(engine, other):
    drafter = ModelDrafter(TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="other")
    events = events_of(
        engine, TINY_PROMPT, drafter, num_speculative_tokens=4, max_new_tokens=50, temperature=1.0, seed=3
    )
    metrics = SpeculationMetrics()
    pending: list[TokenEvent] = []
    for e in events:
        metrics.update(e)
        if isinstance(e, TokenEvent):
            pending.append(e)
        elif isinstance(e, RoundEvent):
            kinds = [t.kind for t in pending]
            assert kinds[: e.num_accepted] == [TokenKind.ACCEPTED] * e.num_accepted
            assert len(kinds) == e.num_committed
            if e.num_committed == e.num_accepted + 1:
                assert kinds[-1] in (TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET)
                assert (kinds[-1] is TokenKind.TARGET) == (e.num_drafted == 0)
                assert (kinds[-1] is TokenKind.BONUS) == (0 < e.num_accepted == e.num_drafted)
            assert all(t.round_index == e.round_index for t in pending)
            pending = []
    done = events[-1]
    assert metrics.num_tokens == len(done.token_ids) == 50
    assert metrics.num_accepted == sum(k is TokenKind.ACCEPTED for k in done.kinds)
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.text


def check_event_grammar(events, gamma, eos, budget, stops=()):
    """Assert the stream's grammar and that the stats agree with it; return the rounds."""
    assert isinstance(events[-1], DoneEvent) and not any(isinstance(e, DoneEvent) for e in events[:-1])
    done = events[-1]
    metrics = SpeculationMetrics()
    rounds, pending, all_tokens = [], [], []
    for e in events:
        metrics.update(e)
        if isinstance(e, TokenEvent):
            pending.append(e)
            all_tokens.append(e)
            continue
        if isinstance(e, DoneEvent):
            assert not pending, "tokens after the last round"
            break
        rounds.append(e)
        assert e.round_index == len(rounds) - 1
        assert 0 <= e.num_accepted <= e.num_drafted <= gamma
        assert [t.round_index for t in pending] == [e.round_index] * len(pending)
        assert [t.position for t in pending] == list(range(len(pending)))
        assert all(t.num_drafted == e.num_drafted for t in pending)
        kinds = [t.kind for t in pending]
        # a bonus only after a full acceptance of a non-empty draft; a round with no draft
        # commits the target's own token
        last = (TokenKind.TARGET if e.num_drafted == 0 else
                TokenKind.BONUS if e.num_accepted == e.num_drafted else TokenKind.RESAMPLED)
        full = [TokenKind.ACCEPTED] * e.num_accepted + [last]
        assert len(kinds) == e.num_committed >= 1
        if e.num_committed < len(full):  # truncated: only by a stop, and only in the last round
            assert e is events[-2] and done.stop_reason in (
                StopReason.EOS,
                StopReason.MAX_NEW_TOKENS,
                StopReason.STOP_STRING,
            )
        assert kinds == full[: e.num_committed]
        pending = []
    # the stop is the last committed token, and only there
    ids = [t.token_id for t in all_tokens]
    assert done.token_ids == tuple(ids) and done.kinds == tuple(t.kind for t in all_tokens)
    assert not any(t in eos for t in ids[:-1]) and len(ids) <= budget
    if done.stop_reason is StopReason.EOS:
        assert ids[-1] in eos
    elif done.stop_reason is StopReason.MAX_NEW_TOKENS:
        assert len(ids) == budget
    # stats = counts of the events
    summary = metrics.summary()
    assert summary["num_tokens"] == len(ids) and summary["num_rounds"] == len(rounds)
    assert summary["num_drafted"] == sum(r.num_drafted for r in rounds)
    assert summary["num_accepted"] == done.kinds.count(TokenKind.ACCEPTED) == sum(r.num_accepted for r in rounds)
    assert summary["num_resampled"] == done.kinds.count(TokenKind.RESAMPLED)
    assert summary["num_bonus"] == done.kinds.count(TokenKind.BONUS)
    assert summary["num_target"] == done.kinds.count(TokenKind.TARGET) == sum(
        r.num_committed for r in rounds if r.num_drafted == 0)
    judged = sum(min(r.num_drafted, r.num_committed) for r in rounds)  # the first rejection or the stop ends judging
    if judged:
        assert summary["acceptance_rate"] == summary["num_accepted"] / judged
    assert summary["mean_tokens_per_round"] == len(ids) / len(rounds)
    return rounds


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("drafter_kind", ["other", "self", "ngram", "ragged", None])
@pytest.mark.parametrize("eos, budget", [((), 30), ((0,), 40), ((), 7)])
def test_event_grammar_every_drafter(drafter_kind, gamma, temperature, eos, budget):
    """FakeLM target (6 ids); 5 seeds per case; EOS inside commits and small budgets truncate rounds."""
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=11, scale=2.0))), None, eos_token_ids=eos)
    prompt = [3, 1, 4, 1, 5, 3, 1, 4]
    drafter = make_drafter(drafter_kind) if drafter_kind else None
    for seed in range(5):
        events = events_of(
            engine,
            prompt,
            drafter,
            num_speculative_tokens=gamma,
            temperature=temperature,
            seed=seed,
            max_new_tokens=budget,
        )
        rounds = check_event_grammar(events, gamma, eos, budget)
        if drafter is None:
            assert all(r.num_drafted == 0 and r.num_committed == 1 for r in rounds)


def test_stop_string_truncates_the_last_round():
    """A stop string completed mid-round: the round is cut there and it is the last one."""
    reply = b"one two three four five"
    prompt = b"> "
    target = FakeLM(257, script_logits(257, list(reply), len(prompt), EOS_BYTE))
    engine = SpeculativeEngine(TransformersRuntime(target), TOK, eos_token_ids=[EOS_BYTE])
    drafter = ScriptDrafter(list(reply), len(prompt))
    events = events_of(
        engine, list(prompt), drafter, num_speculative_tokens=6, max_new_tokens=40, stop_strings=("thr",)
    )
    rounds = check_event_grammar(events, 6, (EOS_BYTE,), 40)
    assert events[-1].stop_reason is StopReason.STOP_STRING and events[-1].text == "one two "
    assert rounds[-1].num_committed < rounds[-1].num_accepted + 1


def test_model_drafter_rounds_report_one_forward_step_per_draft():
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=3, scale=2.0))), None)
    drafter = make_drafter("other")
    events = events_of(engine, [1, 2], drafter, num_speculative_tokens=3, max_new_tokens=12)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert all(r.draft_steps == r.num_drafted > 0 for r in rounds[:-1]), [
        (r.draft_steps, r.num_drafted) for r in rounds
    ]


class _GapDrafter(ScriptDrafter):
    """The script's next tokens, except: nothing at the reply positions in ``empty``, and a wrong
    token at the positions in ``wrong`` (the script's token + 1)."""

    def __init__(self, script, prompt_len, *, empty, wrong):
        super().__init__(script, prompt_len)
        self.empty, self.wrong = set(empty), set(wrong)

    def propose(self, ids, max_tokens, config, generator):
        done = len(ids) - self.prompt_len
        if done in self.empty:
            return Draft(torch.zeros(0, dtype=torch.long), None, 0)
        toks = [self.script[i] + (i in self.wrong) for i in range(done, done + max_tokens)]
        return Draft(torch.tensor(toks, dtype=torch.long), None, 0)


def test_a_round_with_no_draft_commits_a_target_token_not_a_bonus():
    """Scripted rounds at γ = 2, worked out by hand: reply position 0 drafts nothing (the target's
    own token: TARGET); position 1 drafts the two right tokens (ACCEPTED, ACCEPTED, then the
    BONUS); position 4 drafts one right, one wrong (ACCEPTED, RESAMPLED); position 6 drafts
    nothing again (TARGET). A bonus means the drafter was right every time; a round that
    drafted nothing must not claim one."""
    reply = list(b"abcdefgh")
    prompt = list(b"> ")
    target = FakeLM(257, script_logits(257, reply, len(prompt), EOS_BYTE))
    engine = SpeculativeEngine(TransformersRuntime(target), TOK, eos_token_ids=[EOS_BYTE])
    drafter = _GapDrafter(reply, len(prompt), empty={0, 6}, wrong={5})
    events = events_of(engine, prompt, drafter, num_speculative_tokens=2, max_new_tokens=7)
    A, R, B, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET
    done = events[-1]
    assert list(done.token_ids) == reply[:7]  # the target's output, whatever the kinds
    assert list(done.kinds) == [T, A, A, B, A, R, T]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert [(r.num_drafted, r.num_accepted, r.num_committed) for r in rounds] == [(0, 0, 1), (2, 2, 3), (2, 1, 2), (0, 0, 1)]
    metrics = SpeculationMetrics()
    for e in events:
        metrics.update(e)
    summary = metrics.summary()
    assert (summary["num_accepted"], summary["num_resampled"], summary["num_bonus"], summary["num_target"]) == (3, 1, 1, 2)
    assert metrics.acceptance_rate == 3 / 4  # judged: 2 + 2 positions; the target rounds judge none
