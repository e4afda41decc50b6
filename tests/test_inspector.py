"""The inspector, timeline and race views, on rounds built by hand (hand-computed numbers)."""

from __future__ import annotations

import math
import re

from specchat.analysis.trace import CommittedToken, DraftedToken, PositionTrace, RoundTrace
from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.service_api import Pick
from specchat.ui.html.inspector import inspector_html
from specchat.ui.html.race import RaceLane, race_verdict
from specchat.ui.html.rounds import ReplyRounds
from specchat.ui.html.timeline import timeline_html
from specchat.ui.page.host import TraceOnlyService
from specchat.ui.session.chat import ChatSession

A, R, B, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET
TEXTS = {1: "def", 2: " f", 3: " g", 4: "(", 5: ")", 6: ":"}


def _round(index, drafted, committed, positions, *, draft_steps=(), verify_ms=30.0):
    """A RoundEvent with its trace, and its TokenEvents."""
    n = len(drafted)
    trace = RoundTrace(
        drafted=tuple(drafted), next_token_id=committed[-1][0], next_kind=committed[-1][1].value,
        committed=tuple(CommittedToken(t, k.value, TEXTS[t], 0.5, None) for t, k in committed),
        positions=tuple(positions), draft_step_ms=tuple(draft_steps), token_texts=dict(TEXTS),
    )
    num_accepted = sum(1 for d in drafted if d.accepted)
    tokens = [
        TokenEvent(t, k, TEXTS[t], 0.5, None, None, None, None, index, pos, n) for pos, (t, k) in enumerate(committed)
    ]
    rnd = RoundEvent(index, max(n, 1), n, num_accepted, len(committed), tuple(d.accepted for d in drafted if d.accepted is not None),
                     sum(draft_steps), len(draft_steps), verify_ms, 0.0, 0.0, trace=trace)
    return [*tokens, rnd]


def _reply():
    top = ((1, 0.7), (2, 0.2))
    r0 = _round(  # draft "def" accepted (p .7, q .5: ratio 1), " f" rejected (p .2, q .8: ratio .25, u .6), "(" unjudged
        0,
        [DraftedToken(1, 0.7, 0.5, 0.3, True), DraftedToken(2, 0.2, 0.8, 0.6, False), DraftedToken(4, 0.1, 0.9, None, None)],
        [(1, A), (3, R)],
        [PositionTrace(top, top, ((1, 0.5),), ((1, 0.4),)),
         PositionTrace(((2, 0.2), (3, 0.5)), ((3, 0.4),), ((2, 0.8),), ((2, 0.6),), residual_top=((3, 1.0),)),
         PositionTrace(top, top, ((4, 0.9),)), PositionTrace(top, top)],
        draft_steps=(10.0, 12.0, 11.0), verify_ms=40.0,
    )
    r1 = _round(1, [DraftedToken(5, 0.9, 0.3, 0.95, True)], [(5, A), (6, B)],
                [PositionTrace(((5, 0.9),), ((5, 0.9),), ((5, 0.3),)), PositionTrace(((6, 0.8),), ((6, 0.8),))],
                draft_steps=(9.0,), verify_ms=31.0)
    return ReplyRounds.of([*r0, *r1])


def _decision(html: str):
    m = re.search(r"min\(1, p/q\) = ([0-9.]+)</b>; the draw <b>u = ([0-9.]+)</b> (&lt;|≥)", html)
    return float(m.group(1)), float(m.group(2)), m.group(3)


def test_accepted_token_shows_u_below_min_1_p_over_q():
    html = inspector_html(1, _reply(), 0)
    assert "accepted draft (draft 1 of 3)" in html
    assert _decision(html) == (1.0, 0.3, "&lt;")  # min(1, .7/.5) = 1
    # the whole draft: accepted, rejected (struck), unjudged, then the resampled token
    assert html.index("tok-accepted") < html.index("tok-rejected") < html.index("tok-unjudged") < html.index("tok-resampled")
    assert "draft steps 10, 12, 11 ms · verify 40 ms" in html


def test_resampled_token_shows_the_rejection_and_its_residual():
    html = inspector_html(1, _reply(), 1)
    assert "resampled after draft 2 of 3 was rejected" in html
    assert _decision(html) == (0.25, 0.6, "≥")  # min(1, .2/.8) = .25 ≤ u = .6
    assert "the residual norm(max(0, p − q))" in html and 'spec-bar-mark' in html
    assert "tref-1-1" in html  # the resampled chip is clickable (reply 1, token 1)


def test_bonus_token_shows_the_extra_position():
    html = inspector_html(1, _reply(), 3)
    assert "bonus token after the draft was accepted" in html and "extra position" in html
    assert "the draw <b>u" not in html  # nothing was judged at the extra position


def test_timeline_widths_are_proportional_to_the_times():
    html = timeline_html(1, _reply())
    # the longest round (10 + 12 + 11 + 40 = 73 ms) is the full width
    assert "full width = 73 ms" in html
    assert "width:13.70%" in html  # 10 / 73
    assert "width:54.79%" in html  # 40 / 73
    assert "stopped at draft 2/3" in html and "all 1 accepted" in html
    assert "2 of 4 drafted tokens thrown away" in html  # " f" rejected, "(" never judged
    assert "rref-1-0" in html and "rref-1-1" in html


def test_session_select_by_round_and_by_token():
    session = ChatSession(TraceOnlyService("tiny"))

    from specchat.ui.session.chat import Exchange, Reply, ReplySettings

    reply = Reply(1, "hi", ReplySettings("sibling", 4, False, 0.0, 1.0, 16))
    for event in [e for e in _events_of(_reply())]:
        reply.add(event)
    session.views.exchanges.append(Exchange("hi", reply))
    view = session.views.select("round:1:1")
    assert "round 2 ·" in view.inspector and "spec-tl-sel rref-1-1" in view.timeline
    assert "resampled" in session.views.select("1:1").inspector
    assert "Click any token" in session.views.select("7:0").inspector  # an unknown reply: nothing selected
    import pytest

    with pytest.raises(ValueError):
        session.views.select("nonsense")


def _events_of(rr: ReplyRounds):
    out = []
    for k in sorted(rr.rounds):
        first = rr.first_token[k]
        out += rr.tokens[first: first + rr.rounds[k].num_committed] + [rr.rounds[k]]
    out.append(DoneEvent(StopReason.EOS, tuple(t.token_id for t in rr.tokens), tuple(t.kind for t in rr.tokens), "",
                         1.0, 2.0, 3))
    return out


def _lane(name, ids, elapsed, prefill=100.0, top=None):
    lane = RaceLane(name)
    for i, (t, e) in enumerate(zip(ids, elapsed)):
        lane.add(TokenEvent(t, T, TEXTS.get(t, "x"), 1.0, None, None, None, None, i, 0, 0))
        trace = None
        if top is not None:
            trace = RoundTrace((), t, "target", (), (PositionTrace(top[i], top[i]),))
        lane.add(RoundEvent(i, 0, 0, 0, 1, (), 0.0, 0, e, e, e, trace=trace))
    lane.add(DoneEvent(StopReason.EOS, tuple(ids), (T,) * len(ids), "", prefill, elapsed[-1], 3))
    return lane


def test_race_lanes_replay_at_the_measured_times():
    lane = _lane("target only", [1, 2, 3], [100.0, 200.0, 300.0])
    assert lane.times_ms == [200.0, 300.0, 400.0]  # prefill 100 ms + each round's end
    assert lane.total_ms == 400.0
    assert lane.text_until(250.0)[1] == 1 and lane.text_until(400.0)[1] == 3


def test_race_verdict_identical_and_first_difference_with_the_logit_gap():
    base = _lane("target only", [1, 2, 3], [100.0, 200.0, 300.0],
                 top=[((1, 0.9), (2, 0.1)), ((2, 0.5), (3, 0.3)), ((3, 0.9), (1, 0.1))])
    same = _lane("sibling", [1, 2, 3], [50.0, 60.0, 100.0])
    text = race_verdict(base, same, greedy=True)
    assert "Identical text, token for token (3 tokens)" in text
    assert "<b>2.00×</b> faster" in text  # 400 ms vs 200 ms
    other = _lane("sibling", [1, 3, 3], [50.0, 60.0, 100.0])
    text = race_verdict(base, other, greedy=True)
    assert "differ from token 2" in text and f"{math.log(0.5 / 0.3):.3f} apart in logits" in text
    assert "different samples" in race_verdict(base, other, greedy=False)


def test_a_refused_race_says_why_in_its_panel_and_stop_ends_the_replay():
    from specchat.ui.session.chat import ReplySettings

    class Service:  # the members of ChatServiceProtocol a race reads
        banner, picked, runtime = "", None, "transformers"

        def stream_chat(self, *a, **k):
            raise AssertionError("a refused race runs nothing")

        def drafter_kinds(self):
            return ["none", "sibling"]

        def forget_prefix(self):
            pass

    session = ChatSession(Service())
    views = list(session.race.run(None, ReplySettings("sibling", 4, False, 0.0, 1.0, 16)))
    assert "Type a message" in views[-1].race
    views = list(session.race.run("hi", ReplySettings("none", 4, False, 0.0, 1.0, 16)))
    assert "Pick a drafter" in views[-1].race

    class Offering(Service):  # a service that offers ngram and picked it: "auto" races ngram
        picked = Pick("ngram", "measured")

        def drafter_kinds(self):
            return ["none", "ngram"]

    refused = ChatSession(Offering())
    views = list(refused.race.run("hi", ReplySettings("sibling", 4, False, 0.0, 1.0, 16)))
    assert "drafter &#x27;sibling&#x27; is not available for this target (available: none, ngram)" in views[-1].race
    lanes = []

    class Racing(Offering):
        def stream_chat(self, history, message, *, drafter, config, cancel=None):
            lanes.append(drafter)
            return iter(())

    racing = ChatSession(Racing())
    racing.race.stream = lambda history, message, drafter, config, cancel: racing.service.stream_chat(
        history, message, drafter=drafter, config=config)
    views = list(racing.race.run("hi", ReplySettings("auto", 4, False, 0.0, 1.0, 16)))
    assert lanes == ["none", "ngram"] and "auto → ngram" in views[-1].race  # resolved before anything ran
    # a long replay (10 s of measured time) ends at once after Stop, with the verdict
    session.race.lanes = (_lane("target only", [1, 2], [5000.0, 10000.0]), _lane("sibling", [1, 2], [10.0, 20.0]))
    session.stop()
    views = list(session.race.replay(frame_s=0.0))
    assert len(views) == 1 and "Identical text" in views[0].race
