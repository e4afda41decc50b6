"""Events: each round is 0…γ accepted tokens then exactly one resampled or bonus token,
truncated only by a stop; the counts agree with the stats.
"""

from __future__ import annotations

from lossless import TINY_PROMPT, TINY_VOCAB, events_of

from specchat.drafters import ModelDrafter
from specchat.events import RoundEvent, TokenEvent, TokenKind
from specchat.metrics import SpeculationMetrics


def test_event_structure_and_counts(engine, other):
    drafter = ModelDrafter(other, target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="other")
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
                assert kinds[-1] in (TokenKind.RESAMPLED, TokenKind.BONUS)
                assert (kinds[-1] is TokenKind.BONUS) == (e.num_accepted == e.num_drafted)
            assert all(t.round_index == e.round_index for t in pending)
            pending = []
    done = events[-1]
    assert metrics.num_tokens == len(done.token_ids) == 50
    assert metrics.num_accepted == sum(k is TokenKind.ACCEPTED for k in done.kinds)
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.text
