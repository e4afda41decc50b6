"""specchat.ui.session.chat: one browser session's logic, driven directly (no Gradio, no model).

The stream is test_app's scripted FakeService: 7 rounds per repeat, 18 tokens, one target-only
round; a target step takes 100 ms and a drafted token 10 ms on its fake clock, so every number
below is computed by hand from that script.
"""

from __future__ import annotations

import re
import threading

import pytest
from test_app import REPLY_TEXT, FakeService

from specchat.conversation import Conversation
from specchat.core.events import StopReason
from specchat.service import Notice
from specchat.ui.html.transcript import feed_messages
from specchat.ui.session import chat as session_module
from specchat.ui.session.chat import CHART_SCOPES, ChatSession, Phase, ReplySettings, SessionStore, View
from specchat.ui.session.views import LIVE_PANELS


def settings(drafter="int4", gamma=4, adaptive=True, temperature=0.0, top_p=1.0, max_new_tokens=256):
    return ReplySettings(drafter, gamma, adaptive, temperature, top_p, max_new_tokens)


def run(session: ChatSession, message="go", **kw) -> list[View]:
    return list(session.respond(message, settings(**kw)))


def last_message(views: list[View]) -> str:
    """The last message the page's transcript was given (HTML), from the last view that had one."""
    return feed_messages(next(v.transcript for v in reversed(views) if v.transcript))[-1]["content"]


def test_a_reply_is_labeled_with_what_made_it_and_ends_with_its_own_summary():
    s = ChatSession(FakeService())
    views = run(s, drafter="sibling-int4", gamma=12, adaptive=True, temperature=0.7, top_p=0.9)
    reply = s.views.latest
    assert reply.label == "#1 · sibling-int4 · γ adaptive ≤ 12 · T 0.7 · top-p 0.9"
    assert run(s, drafter="ngram", gamma=3, adaptive=False) and s.views.latest.label == "#2 · ngram · γ = 3 · T 0 (greedy) · top-p 1"
    assert run(s, drafter="none") and s.views.latest.label.startswith("#3 · none · γ — ·")
    bubble = feed_messages(views[-1].transcript)[1]["content"]
    assert bubble.startswith('<div class="spec-label">#1 · sibling-int4 · γ adaptive ≤ 12 · T 0.7 · top-p 0.9</div>')
    # 18 tokens in 7 rounds; α = 11 accepted of 16 judged; t₁ = 100 ms from the one target-only
    # round: too few steps for a speedup (18 × 100 / 940 = 1.91× is computed, not shown)
    assert ("18 tokens · α 0.69 · 2.57 tokens/round · speedup held back (timing: 1 target step of the 3 needed)" in bubble)
    assert reply.metrics.measured_speedup == pytest.approx(1800 / 940)
    # the script three times over: 3 target steps of 100 ms (no scatter) carry it
    longer = ChatSession(FakeService(rounds=3))
    bubble = feed_messages(run(longer, drafter="ngram")[-1].transcript)[1]["content"]
    assert ("54 tokens · α 0.69 · 2.57 tokens/round · 1.91× ±0.00 against 3 target steps timed in this reply "
            "(95 % interval)" in bubble)


def test_the_stats_shown_while_a_reply_streams_belong_to_that_reply():
    """A drafter picked while reply 1 streams is used by the next message; reply 1 keeps its label
    and its stats, and while reply 2 streams the stats are reply 2's."""
    fake = FakeService(rounds=3)
    s = ChatSession(fake, text_interval_s=0.0, stats_interval_s=0.0)
    first = s.respond("one", settings(drafter="int4"))
    views_1 = [next(first) for _ in range(3)]
    # meanwhile the user picks ngram in the menu and sends (the app queues it behind reply 1)
    assert s.note_sent().waits
    views_1 += list(first)
    views_2 = list(s.respond("two", settings(drafter="ngram")))
    assert all("#1 · int4" in v.stats for v in views_1 if v.stats and "no reply" not in v.stats)
    assert all("#2 · ngram" in v.stats for v in views_2 if v.stats)
    assert [r.label.split(" · ")[1] for r in s.views.replies] == ["int4", "ngram"]
    assert [c["drafter"] for c in fake.calls] == ["int4", "ngram"]


def test_no_transient_line_before_the_first_round_and_counts_always_agree():
    """Views are drawn only at a round's end: never '1 tokens in 0 rounds', never a token count
    that disagrees with the rounds' (every stats line's kinds add up to its token count)."""
    import re

    s = ChatSession(FakeService(rounds=2), text_interval_s=0.0, stats_interval_s=0.0)
    views = run(s)
    stats = [v.stats for v in views if v.stats]
    assert "generating…" in stats[0] and "tokens in" not in stats[0]
    for line in stats[1:]:
        m = re.search(r"(\d+) tokens? in (\d+) rounds?: .*?(\d+) accepted.*?(\d+) resampled.*?(\d+) bonus"
                      r"(?:.*?(\d+) target only)?", line)
        tokens, rounds, *kinds = m.groups()
        assert int(rounds) > 0 and int(tokens) == sum(int(k or 0) for k in kinds)


def test_streaming_is_throttled_and_ends_with_a_complete_view():
    clock = [0.0]

    def tick():
        clock[0] += 0.05  # 50 ms between stream items
        return clock[0]

    s = ChatSession(FakeService(rounds=8), text_interval_s=0.25, plot_interval_s=1.0, clock=tick)
    s.views.panels_visible = set(LIVE_PANELS)  # every panel on screen: each redraws live
    views = run(s)
    # 56 rounds, 144 tokens: at most one view per 0.25 s of the fake clock (plus the first and last)
    assert 3 <= len(views) < 60
    assert sum(v.figures is not None for v in views) < len(views)  # figures at most once a second
    last = views[-1]
    assert last.transcript and last.stats and last.table and last.figures and "144 tokens in 56 rounds" in last.stats
    # the reply's end comes first alone (transcript and stats), then every panel
    assert views[-2].transcript and views[-2].stats and views[-2].figures is None
    assert s.history[-1]["content"] == REPLY_TEXT * 8


def test_a_reply_is_drawn_round_by_round_until_it_shows_text_then_throttled(monkeypatch):
    """The first rounds of a code reply ("```", "python\n") show an empty code block: each is drawn
    at once until a line of code shows, not a text interval later (on the page the first text came
    a median 0.4 s after the engine's, docs/BENCHMARKS.md); then at most one draw per interval."""
    import test_app
    from test_app import A, B, T

    monkeypatch.setattr(test_app, "SCRIPT", [(0, 0, [("```", T)]), (1, 1, [("python\n", A), ("def", B)]),
                                             (1, 1, [(" f", A), ("(x)", B)]), (1, 1, [(":", A), ("\n", B)])])
    clock = [0.0]

    def tick():  # 1 ms a stream item on the clock that throttles: every round within one text interval
        clock[0] += 0.001
        return clock[0]

    s = ChatSession(FakeService(delay_s=0.05), text_interval_s=0.4, stats_interval_s=0, plot_interval_s=0, clock=tick)
    views = [v for v in run(s) if v.streaming and v.transcript]
    drawn = ["".join(t for b in v.transcript["items"][-1]["reply"]["blocks"] if isinstance(b, dict)
                     for t in re.findall(r">([^<]+)</span>", "".join(b["lines"]))) for v in views]
    # the fence alone, then at once the round that shows the first line (or, on a slow machine, a
    # later round already waiting), then nothing more within the interval
    assert len(drawn) == 2 and drawn[0] == "" and drawn[1].startswith("def"), drawn


def test_one_stop_stops_the_reply_and_cancels_the_message_waiting_behind_it():
    fake = FakeService(delay_s=0.01, rounds=50)
    s = ChatSession(fake)
    assert s.note_sent().waits is False
    streaming = s.respond("first", settings())
    views = [next(streaming), next(streaming)]
    assert s.note_sent().waits is True  # "second" waits behind the streaming reply
    said = s.stop()
    assert said == "Stopped; your queued message was cancelled and not sent (shown in the chat)."
    views += list(streaming)
    assert s.views.latest.phase is Phase.STOPPED and 'class="spec-status">stopped<' in last_message(views)
    stats_of_stopped = views[-1].stats
    waiting = list(s.respond("second", settings()))  # its turn in the queue comes: it was cancelled
    assert len(fake.calls) == 1  # it never reached the model
    assert waiting[-1].stats is None  # the stopped reply's stats stay on screen
    note = feed_messages(waiting[-1].transcript)
    assert len(note) == 1 and "second" in note[0]["content"] and "not sent" in note[0]["content"]
    assert [m["content"] for m in s.history if m["role"] == "user"] == ["first"]
    assert stats_of_stopped and "#1 · int4" in stats_of_stopped
    # the Stop was used up: the next message runs
    s.note_sent()
    run(s, "third")
    assert len(fake.calls) == 2 and s.views.latest.phase is Phase.DONE


def test_stop_while_only_messages_wait_cancels_them():
    fake = FakeService()
    s = ChatSession(fake)
    s.note_sent(), s.note_sent()
    assert "your 2 queued messages were cancelled" in s.stop()
    run(s, "a"), run(s, "b")
    assert fake.calls == [] and [e.note is not None for e in s.views.exchanges] == [True, True]
    assert s.stop() is None  # nothing left to stop


def test_clear_mid_stream_ends_on_an_empty_chat_and_drops_waiting_messages():
    fake = FakeService(delay_s=0.01, rounds=50)
    s = ChatSession(fake)
    s.note_sent()
    streaming = s.respond("first", settings())
    next(streaming), next(streaming)
    s.note_sent()  # waits
    cleared = s.clear()
    assert cleared.transcript["reset"] and cleared.transcript["items"] == [] and "no reply yet" in cleared.stats
    rest = list(streaming)
    # Gradio re-sends a stream's last update when it completes: it must be the empty chat
    assert rest[-1].transcript["reset"] and rest[-1].transcript["items"] == [] and s.history == [] and s.views.exchanges == []
    assert list(s.respond("waiting", settings()))[-1].transcript is None and len(fake.calls) == 1


def test_stop_then_clear_leaves_an_empty_chat_and_the_next_reply_is_number_one():
    """Stop cancels the waiting message; Clear right after (before the round ends) drops it
    too: it must not come back on the new chat as "not sent". The new conversation's first
    reply is #1 again."""
    fake = FakeService(delay_s=0.01, rounds=50)
    s = ChatSession(fake)
    s.note_sent("first")
    streaming = s.respond("first", settings())
    next(streaming), next(streaming)
    s.note_sent("queued")
    assert "your queued message was cancelled" in s.stop()
    s.clear()
    list(streaming)
    assert list(s.respond("queued", settings()))[-1].transcript is None and s.views.exchanges == []
    assert s.stop() is None  # nothing is left waiting
    s.note_sent("next")
    run(s, "next")
    assert [e.message for e in s.views.exchanges] == ["next"] and s.views.latest.number == 1
    assert s.views.latest.label.startswith("#1 · ") and "<td>1</td>" in s.views.table()


def test_blank_messages_sent_while_a_reply_streams_are_not_counted_as_waiting():
    """Enter or Send on an empty box during a reply: a warning, no "queued" bubble, and Stop
    does not report them as cancelled messages."""
    fake = FakeService(delay_s=0.01, rounds=50)
    s = ChatSession(fake)
    s.note_sent("first")
    streaming = s.respond("first", settings())
    next(streaming), next(streaming)
    for blank in ("", "   ", "\u200b"):
        s.note_sent(blank)
        views = list(s.respond(blank, settings()))
        assert views[-1].toasts == (("warning", "Type a message first."),)
    assert s.stop() is None  # the reply stops; no message was waiting
    list(streaming)
    assert [e.message for e in s.views.exchanges] == ["first"] and len(fake.calls) == 1


def test_closing_the_stream_cancels_the_engine_and_keeps_the_partial_reply():
    """A closed tab: Gradio closes the generator (GeneratorExit) -> the engine's cancel is set."""
    fake = FakeService(delay_s=0.01, rounds=50)
    s = ChatSession(fake, text_interval_s=0.0, stats_interval_s=0.0)
    gen = s.respond("go", settings())
    [next(gen) for _ in range(4)]
    cancel = fake.cancels[-1]
    assert isinstance(cancel, threading.Event) and not cancel.is_set()
    gen.close()
    assert cancel.is_set() and s.views.latest.phase is Phase.STOPPED
    assert s.history[0] == {"role": "user", "content": "go"}
    partial = s.history[1]["content"]
    assert partial and (REPLY_TEXT * 50).startswith(partial) and len(partial) < len(REPLY_TEXT * 50)


def test_a_blank_message_warns_and_goes_back_to_the_box():
    fake = FakeService()
    s = ChatSession(fake)
    views = list(s.respond("  \u200b ", settings()))
    assert views == [View(textbox="  \u200b ", toasts=(("warning", "Type a message first."),))]
    assert fake.calls == [] and s.views.exchanges == []


def test_a_failure_is_shown_kept_out_of_the_history_and_the_message_goes_back():
    s = ChatSession(FakeService())
    views = run(s, "boom now")
    last = views[-1]
    assert last.textbox == "boom now" and last.toasts[0][0] == "warning"
    assert "the engine failed on purpose" in last_message(views) and s.views.latest.phase is Phase.FAILED
    assert s.history == [] and s.views.table().count("<tr>") == 2  # header + the failed reply's row


def test_a_drafter_that_could_not_load_is_named_in_the_label():
    fake = FakeService()

    def stream(history, message, *, drafter, config, cancel=None, prefill_progress=False):
        yield Notice("The drafter 'int4' could not be loaded (oom)", warning=True, fallback_drafter="int4")
        yield from FakeService.stream_chat(fake, history, message, drafter="none", config=config, cancel=cancel)

    fake.stream_chat = stream
    s = ChatSession(fake, text_interval_s=0.0, stats_interval_s=0.0)
    views = run(s, drafter="int4")
    assert s.views.latest.label.startswith("#1 · none (int4 could not be loaded) · γ — ·")
    assert ("warning", "The drafter 'int4' could not be loaded (oom)") in [t for v in views for t in v.toasts]
    assert s.views.latest.row()["drafter"] == "none *"
    assert "* the drafter asked for could not be used" in s.views.table()


def test_the_table_after_three_replies_with_different_drafters():
    """Rows computed by hand from the fake's script, three times over (3 timed target steps):
    the same 21 rounds whatever the drafter."""
    s = ChatSession(FakeService(rounds=3))
    for drafter in ("ngram", "int4", "sibling"):
        run(s, drafter=drafter)
    rows = [r.row() for r in s.views.replies]
    assert [r["drafter"] for r in rows] == ["ngram", "int4", "sibling"]
    for r in rows:
        assert r["tokens"] == 54 and r["alpha"] == pytest.approx(11 / 16)
        assert r["tokens_per_round"] == pytest.approx(18 / 7) and r["speedup"] == pytest.approx(1800 / 940)
    html = s.views.table()
    assert html.count("<tr>") == 4 and "<td>sibling</td>" in html and "<td>1.91×</td>" in html
    assert "vs target-only steps timed during this reply" in html
    assert "<th>state</th>" in html and html.count("<td>done</td>") == 3
    assert "*" not in html  # no drafter fell back, so no footnote for one


def test_the_charts_show_this_reply_or_the_whole_conversation():
    s = ChatSession(FakeService(rounds=3))
    run(s, drafter="ngram"), run(s, drafter="int4")
    reply_figures = s.views.figures()
    assert reply_figures[2].layout.title.text.startswith("reply #2 · Speed: ")
    view = s.views.set_chart_scope(CHART_SCOPES[1])
    assert view.transcript is None and len(view.figures) == 4
    speedup = view.figures[2]
    assert list(speedup.data[0].x) == ["#1 ngram", "#2 int4"]
    assert list(speedup.data[0].y) == pytest.approx([round(1800 / 940, 3)] * 2)
    assert s.views.view().figures[2].layout.title.text.startswith("Speedup by reply")  # the choice sticks
    with pytest.raises(ValueError, match="not one of"):
        s.views.set_chart_scope("everything")


def test_the_models_still_loading_then_failing_puts_the_message_back():
    fake = FakeService()
    fake.ready, fake.startup_error = threading.Event(), None
    s = ChatSession(fake)
    gen = s.respond("early", settings())
    first = next(gen)
    assert "waiting for the models" in feed_messages(first.transcript)[-1]["content"]
    fake.startup_error = RuntimeError("disk full")
    fake.ready.set()
    last = list(gen)[-1]
    assert last.textbox == "early" and s.views.exchanges == [] and "disk full" in last.toasts[0][1]
    assert last.transcript["items"] == [{"id": 1, "removed": True}]  # the page takes the waiting message out


def test_session_store_keeps_one_session_per_tab_and_evicts_only_idle_ones():
    made = []

    def factory():
        made.append(ChatSession(FakeService()))
        return made[-1]

    store = SessionStore(factory, capacity=2)
    a = store.get("a")
    assert store.get("a") is a and len(store) == 1
    a.note_sent()  # busy: a message waits
    store.get("b"), store.get("c")
    assert "a" in store and "b" not in store and len(store) == 2  # b was the idle one
    store.drop("a")
    assert "a" not in store
    assert store.get(None) is not store.get(None)  # no session hash: a throwaway session


def test_settings_are_validated_with_the_range():
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        Conversation().config(settings(top_p=1.5))
    assert Conversation().config(settings()).measure_speedup is True


def test_a_cancelled_done_event_marks_the_reply_stopped():
    fake = FakeService()

    def stopped(history, message, *, drafter, config, cancel=None, prefill_progress=False):
        from test_app import B

        from specchat.core.events import DoneEvent

        yield from list(FakeService.stream_chat(fake, history, message, drafter=drafter, config=config))[:4]
        yield DoneEvent(StopReason.CANCELLED, (0,), (B,), "Sure", 1.0, 1.0, 3)

    fake.stream_chat = stopped
    s = ChatSession(fake)
    views = run(s)
    assert s.views.latest.phase is Phase.STOPPED and 'class="spec-status">stopped<' in last_message(views)
    assert session_module.Phase.STOPPED.value in s.views.latest.row()["state"]


def test_no_page_update_just_before_a_timing_round():
    """The browser draws on the same CPU: an update sent right before a timing round would slow
    that target-only step and bias t₁, so the session holds it until after that round."""
    from specchat.core.events import RoundEvent

    fake = FakeService(rounds=2, delay_s=0.02)  # rounds apart: each is read before the next (none drawn instead)
    base = fake.stream_chat

    def stream(history, message, **kw):
        for item in base(history, message, **kw):
            if isinstance(item, RoundEvent) and item.round_index in (2, 9):
                item = RoundEvent(**{**item.__dict__, "timing_next": True})
            yield item

    fake.stream_chat = stream
    s = ChatSession(fake, text_interval_s=0.0, stats_interval_s=0.0, plot_interval_s=0.0)
    views = run(s)
    import re

    rounds_shown = [int(m.group(1)) for v in views if v.stats and (m := re.search(r"tokens in (\d+) rounds", v.stats))]
    assert 3 not in rounds_shown and 10 not in rounds_shown  # after rounds 2 and 9 (0-based): held
    assert {2, 4, 9, 11, 14} <= set(rounds_shown)


def test_every_panel_follows_the_focused_reply_and_names_it_and_a_pin_keeps_it():
    s = ChatSession(FakeService())
    s.views.panels_visible = set(LIVE_PANELS)
    run(s, drafter="int4"), run(s, drafter="ngram")
    assert all(f.layout.title.text.startswith("reply #2 · ") for f in s.views.figures())
    view = s.views.select("1:0")  # a click on a token of reply #1: every panel shows reply #1
    assert all(f.layout.title.text.startswith("reply #1 · ") for f in view.figures)
    assert "Reply #1" in view.ledger and "reply #1:" in view.timeline
    s.views.panels_visible = set()  # charts off screen: drawn when they come on screen
    assert s.views.select("2:0").figures is None
    assert all(f.layout.title.text.startswith("reply #2 · ") for f in s.views.show_panels({"charts"}).figures)
    s.views.panels_visible = set(LIVE_PANELS)
    s.views.select("1:0")
    views = run(s)  # a new reply takes the focus back
    assert "Reply #3" in views[-1].ledger and views[-1].figures[0].layout.title.text.startswith("reply #3 · ")
    s.views.pinned = True
    s.views.select("1:0")
    views = run(s)  # unless the clicked reply is pinned
    assert "Reply #1" in views[-1].ledger and views[-1].figures[0].layout.title.text.startswith("reply #1 · ")
    assert "reply #1:" in views[-1].timeline


def test_the_ledger_follows_the_focused_reply_and_the_worth_chart_has_each_drafter():
    """The fake's 7 rounds commit 18 tokens: 7 target passes against 18, 2.57× fewer; the sizes
    the service reports give ĉ = 250 / 1000 = 0.25. Two drafters → two points on α against c."""
    from specchat.analysis.ledger import ModelSize, ModelSizes

    service = FakeService()
    service.model_sizes = lambda drafter: ModelSizes(ModelSize(1000, 2000), ModelSize(250, 500))
    s = ChatSession(service)
    s.views.panels_visible = {"ledger"}  # on screen: drawn at each reply's end
    views = run(s, drafter="int4")
    ledger = views[-1].ledger
    assert "Reply #1" in ledger and "2.57× fewer" in ledger and "ĉ = 0.25" in ledger
    assert s.views.latest.sizes.flop_ratio == 0.25
    views = run(s, drafter="ngram")
    assert "Reply #2" in views[-1].ledger
    points = {t.name for t in views[-1].worth.data if t.mode == "markers+text"}
    assert points == {"int4", "ngram"}
    assert "Reply #1" in s.views.select("1:0").ledger  # a click on reply #1 shows its ledger
    # a service that cannot say (or fails to): the ledger says ĉ is unknown, the reply is fine
    bare = ChatSession(FakeService())
    run(bare)
    assert "ĉ unknown" in bare.views.analysis()[0]
    broken = FakeService()
    broken.model_sizes = lambda drafter: 1 / 0
    broken_session = ChatSession(broken)
    run(broken_session)
    assert "ĉ unknown" in broken_session.views.analysis()[0]


def test_each_race_lane_prefills_the_whole_prompt():
    """The race times prefill + decode of each lane: the second lane must not reuse the first
    lane's kept prompt cache, so the service's kept caches are dropped before each lane."""
    service = FakeService()
    dropped = []
    service.forget_prefix = lambda: dropped.append(len(dropped))
    s = ChatSession(service)
    views = list(s.race.run("go", settings(drafter="int4")))
    assert views and dropped == [0, 1]
    assert s.race.lanes is not None and all(lane.done is not None for lane in s.race.lanes)
