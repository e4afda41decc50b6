"""Issue 35, in the session (no Gradio, no model): a message sent while a reply streams is shown at
once, marked queued, with its own cancel; a long prefill shows its progress, is announced, and
Stop ends it with nothing kept for the model; the conversation survives a reload (what the
browser keeps, checked field by field) with its system prompt, which reaches the chat template."""

from __future__ import annotations

import threading
import time

import pytest
from test_app import REPLY_TEXT, FakeService
from test_session import run, settings

from specchat.core.events import DoneEvent, PrefillEvent, StopReason
from specchat.ui.html.transcript import feed_messages
from specchat.ui.session.chat import SAVED_VERSION, ChatSession, Phase, parse_saved
from specchat.ui.session.reply import ReplySettings
from specchat.ui.session.saved import RELOADED_NOTE


def _streaming():
    """(service, session, its reply's stream): "first" sent and streaming, two updates in (50
    repeats of the script, 10 ms a round: it lasts while the test acts)."""
    fake = FakeService(delay_s=0.01, rounds=50)
    s = ChatSession(fake, text_interval_s=0.0)
    s.note_sent("first")
    streaming = s.respond("first", settings())
    next(streaming), next(streaming)
    return fake, s, streaming


def _items(view):
    return {i["id"]: i for i in view.transcript["items"]} if view.transcript else {}


def test_a_queued_message_is_taken_by_its_id_not_by_its_text():
    """Two waiting messages with the same text: each reply runs in its own message's bubble,
    found by the id the page carries, whatever order the replies start in; a cancelled one never
    reaches the model."""
    fake, s, streaming = _streaming()
    first, second = s.note_sent("again"), s.note_sent("again")
    assert first.waits and second.waits and first.ticket != second.ticket
    bubble_1, bubble_2 = s.views.exchanges[1], s.views.exchanges[2]
    list(streaming)
    list(s.respond("again", settings(), second.ticket))
    assert bubble_2.reply is not None and bubble_2.reply.number == 2 and bubble_1.reply is None
    list(s.respond("again", settings(), first.ticket))
    assert bubble_1.reply is not None and bubble_1.reply.number == 3
    third = s.note_sent("later")
    s.cancel_queued(s.views.exchanges[3].id)
    list(s.respond("later", settings(), third.ticket))
    assert [c["message"] for c in fake.calls] == ["first", "again", "again"]


def test_a_message_sent_while_a_reply_streams_is_shown_at_once_marked_queued_with_its_own_cancel():
    fake, s, streaming = _streaming()
    assert s.note_sent("second").waits is True and s.note_sent("third").waits is True
    second, third = s.views.exchanges[1], s.views.exchanges[2]
    assert [e.message for e in s.views.exchanges] == ["first", "second", "third"]  # the order sent
    # the streaming reply's next update carries both queued bubbles, each with its cancel button
    carried = next(v for v in streaming if v.transcript and second.id in _items(v))
    items = _items(carried)
    assert third.id in items and items[second.id]["reply"] is None
    assert f"qref-{second.id}" in items[second.id]["user"] and "queued" in items[second.id]["user"]
    # its own cancel: only that message (the later one of the two); the reply streaming now goes on
    assert s.cancel_queued(third.id).startswith("Cancelled: that message will not be sent. Its text stays in the chat")
    cancelled = next(v for v in streaming if v.transcript and third.id in _items(v))
    assert "not sent: you cancelled it while it waited" in _items(cancelled)[third.id]["user"]
    assert "qref-" not in _items(cancelled)[third.id]["user"] and not fake.cancels[0].is_set()
    list(streaming)
    assert s.views.exchanges[0].reply.phase is Phase.DONE
    second_views = list(s.respond("second", settings()))
    assert list(s.respond("third", settings()))  # its turn: cancelled, it never reaches the model
    assert [c["message"] for c in fake.calls] == ["first", "second"]
    # "second" ran in the bubble shown since it was sent (same transcript id), as reply #2
    assert second.reply is not None and second.reply.number == 2 and second.id in _items(second_views[0])
    assert third.reply is None and "not sent: you cancelled it" in third.item()["user"]
    assert [m["content"] for m in s.history if m["role"] == "user"] == ["first", "second"]
    assert "no longer waiting" in s.cancel_queued(second.id)


def test_stop_marks_every_queued_bubble_not_sent_and_clear_drops_them():
    fake, s, streaming = _streaming()
    s.note_sent("a"), s.note_sent("b")
    assert s.stop() == "Stopped; your 2 queued messages were cancelled and not sent (shown in the chat)."
    last = list(streaming)
    shown = {i["id"]: i for v in last if v.transcript for i in v.transcript["items"]}
    assert all("not sent: Stop cancelled it while it waited" in shown[e.id]["user"] for e in s.views.exchanges[1:])
    run(s, "a"), run(s, "b")
    assert len(fake.calls) == 1 and not s.busy
    s.note_sent("c")
    s.clear()
    assert s.views.exchanges == [] and list(s.respond("c", settings()))[-1].transcript is None and len(fake.calls) == 1


def _prefill_stream(events_before, *, then_reply=True, pass_s=0.0):
    """A stream: PrefillEvents (as the engine gives them, a forward pass of ``pass_s`` between
    them), then the scripted reply, honouring cancel between passes as the engine does."""
    fake = FakeService()

    def stream(history, message, *, drafter, config, cancel=None, prefill_progress=False):
        assert prefill_progress  # the page asks for the prefill's progress
        fake.calls.append({"history": [dict(m) for m in history], "message": message})
        for event in events_before:
            if event.num_done:
                time.sleep(pass_s)
            if cancel is not None and cancel.is_set():
                yield DoneEvent(StopReason.CANCELLED, (), (), "", event.elapsed_ms, 0.0, 7761, num_prefilled=event.num_done)
                return
            yield event
        if then_reply:
            yield from FakeService.stream_chat(fake, history, message, drafter=drafter, config=config, cancel=cancel)

    fake.stream_chat = stream
    return fake


LONG = [PrefillEvent("target", 0, 7760, 7761, 3.0, None),
        PrefillEvent("target", 128, 7760, 7761, 1290.0, 77_000.0),
        PrefillEvent("target", 256, 7760, 7761, 2580.0, 75_800.0)]


def test_a_long_prefill_shows_its_progress_and_is_announced_once_with_the_count_and_the_estimate():
    s = ChatSession(_prefill_stream(LONG), text_interval_s=0.0)
    views = run(s)
    toasts = [t for v in views for t in v.toasts]
    # 1.29 s + 77.0 s: "about 1 min 18 s", announced once, with the prompt's length
    assert toasts == [("info", "The prompt (your message with the conversation and the system prompt) is 7,761 tokens: "
                               "reading it takes about 1 min 18 s on this machine before the reply starts (measured "
                               "here). Stop cancels it.")]
    bars = [feed_messages(v.transcript)[-1]["content"] for v in views if v.transcript]
    assert any('<progress max="7760" value="128">' in b and "Reading your message: 128 of 7,760 tokens · 1 s · "
               "about 1 min 17 s left" in b for b in bars)
    assert any('value="256"' in b for b in bars)
    assert s.views.latest.phase is Phase.DONE and "<progress" not in bars[-1] and s.views.latest.renderer.text == REPLY_TEXT


def test_a_short_prefill_shows_no_bar_and_no_toast():
    quick = [PrefillEvent("target", 0, 40, 41, 0.1, 2.0), PrefillEvent("target", 40, 40, 41, 300.0, 0.0)]
    s = ChatSession(_prefill_stream(quick), text_interval_s=0.0)
    views = run(s)
    assert not any(v.toasts for v in views) and s.views.latest.prefill is None
    assert not any("<progress" in m["content"] for v in views if v.transcript for m in feed_messages(v.transcript))


def test_stop_during_the_prefill_says_how_far_it_read_and_keeps_nothing_for_the_model():
    fake = _prefill_stream(LONG, pass_s=0.3)
    s = ChatSession(fake, text_interval_s=0.0)
    streaming = s.respond("a long document", settings())
    for _ in streaming:
        if s.views.latest is not None and s.views.latest.prefill is not None and s.views.latest.prefill.num_done == 128:
            s.stop()
            break
    rest = list(streaming)
    assert s.views.latest.phase is Phase.STOPPED and s.history == []  # nothing answered: not in what the model sees
    assert ("stopped while reading your message (128 of 7,760 tokens read): nothing was generated"
            in feed_messages(rest[-1].transcript)[-1]["content"])


def test_the_system_prompt_reaches_the_model_first_and_is_not_kept_as_a_turn():
    fake = FakeService()
    s = ChatSession(fake)
    list(s.respond("hi", ReplySettings("int4", 4, True, 0.0, 1.0, 64, "Answer in French.")))
    list(s.respond("again", ReplySettings("int4", 4, True, 0.0, 1.0, 64, "  ")))  # blank: no system message
    assert fake.calls[0]["history"] == [{"role": "system", "content": "Answer in French."}]
    assert fake.calls[1]["history"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": REPLY_TEXT}]
    assert all(m["role"] != "system" for m in s.history)


def test_the_conversation_survives_a_reload_with_its_system_prompt():
    fake = FakeService()
    before = ChatSession(fake)
    list(before.respond("hi", ReplySettings("int4", 4, True, 0.0, 1.0, 64, "Be brief.")))
    before.note_sent(), before.stop()
    list(before.respond("never sent", settings()))
    saved = before.saved()
    assert saved["version"] == SAVED_VERSION and saved["system_prompt"] == "Be brief."
    assert saved["history"] == before.history and [e["message"] for e in saved["exchanges"]] == ["hi", "never sent"]
    after = ChatSession(fake)  # the reloaded page's new session
    view = after.restore(saved)
    shown = feed_messages(view.transcript)
    assert view.transcript["reset"] and "restored (after a reload" in shown[1]["content"]
    assert "#1 · int4 · γ adaptive ≤ 4" in shown[1]["content"] and "not sent" in shown[2]["content"]
    assert after.history == before.history and after.conversation.system_prompt == "Be brief."
    # the stats line says the figures were not kept, not "no reply yet" under a restored reply
    assert "restored as text" in after.views.stats() and "no reply yet" not in after.views.stats()
    assert "no reply yet" in ChatSession(fake).views.stats()
    # what the browser keeps is stable across reloads (but for the key: each session writes its own)
    assert {**after.saved(), "key": ""} == {**saved, "key": ""} and after.saved()["key"] != saved["key"]
    list(after.respond("and then?", ReplySettings("int4", 4, True, 0.0, 1.0, 64, after.conversation.system_prompt)))
    assert fake.calls[-1]["history"] == [{"role": "system", "content": "Be brief."}, *before.history]
    assert after.views.latest.number == 2  # numbering goes on after the restored reply
    assert after.restore(saved) is None  # a page with a conversation is left as it is


@pytest.mark.parametrize("bad", [
    "a string", {"version": 99, "history": [], "exchanges": [{"message": "x"}]},
    {"version": SAVED_VERSION, "history": [{"role": "system", "content": "sneaky"}], "exchanges": [{"message": "x"}]},
    {"version": SAVED_VERSION, "history": [{"role": "user", "content": 3}], "exchanges": [{"message": "x"}]},
    {"version": SAVED_VERSION, "history": [], "exchanges": [{"message": "x", "text": ["not", "text"]}]},
    {"version": SAVED_VERSION, "history": [], "exchanges": [{"message": "x"}], "system_prompt": 5},
    {"version": SAVED_VERSION, "history": [], "exchanges": [{"message": "x" * 4_000_001}]},
])
def test_a_saved_value_that_is_not_a_conversation_is_not_restored(bad):
    with pytest.raises(ValueError):
        parse_saved(bad)
    s = ChatSession(FakeService())
    assert s.restore(bad) is None and s.views.exchanges == [] and s.history == []
    assert parse_saved(None) is None


def test_a_restored_reply_is_text_only_and_escaped():
    saved = {"version": SAVED_VERSION, "history": [], "system_prompt": "",
             "exchanges": [{"message": "<img src=x onerror=alert(1)>", "label": "#1 · none", "summary": "3 tokens",
                            "text": "**bold** <script>alert(1)</script>"}]}
    view = ChatSession(FakeService()).restore(saved)
    user, reply = (m["content"] for m in feed_messages(view.transcript))
    assert "<img" not in user and "&lt;img" in user
    assert "<strong>bold</strong>" in reply and "<script>" not in reply


def test_after_a_reload_the_charts_say_the_restored_replies_have_no_figures():
    saved = {"version": SAVED_VERSION, "history": [], "system_prompt": "",
             "exchanges": [{"message": "hi", "label": "#1 · none", "summary": "3 tokens", "text": "Hello!"}]}
    s = ChatSession(FakeService())
    s.restore(saved)
    hints = [a.text for fig in s.views.figures() for a in fig.layout.annotations]
    assert len(hints) == 4 and all("restored as text: their figures are not kept" in h for h in hints)
    empty = ChatSession(FakeService())  # nothing restored: each chart's own hint
    assert not any("restored" in a.text for fig in empty.views.figures() for a in fig.layout.annotations)


def test_queued_bubbles_are_carried_while_the_models_load():
    fake = FakeService()
    fake.ready = threading.Event()  # still loading
    s = ChatSession(fake, text_interval_s=0.0)
    s.note_sent("first")
    waiting = s.respond("first", settings())
    next(waiting)
    s.note_sent("second")
    carried = next(waiting)  # the wait's next update carries it
    assert [i["id"] for i in carried.transcript["items"]] == [s.views.exchanges[1].id]
    fake.ready.set()
    list(waiting)


def test_a_message_sent_during_a_long_round_is_shown_before_the_round_ends():
    """A round (or a prefill pass) that takes seconds: the queued bubble is carried by the stream's
    next idle tick, not held until the round's end."""
    fake = FakeService()
    release = threading.Event()

    def stream(history, message, *, drafter, config, cancel=None, prefill_progress=False):
        events = list(FakeService.stream_chat(fake, history, message, drafter=drafter, config=config, cancel=cancel))
        yield from events[:4]
        release.wait(10)  # a long round
        yield from events[4:]

    fake.stream_chat = stream
    s = ChatSession(fake, text_interval_s=0.1)
    s.note_sent("first")
    streaming = s.respond("first", settings())
    next(streaming)
    s.note_sent("second")
    start = time.monotonic()
    carried = next(v for v in streaming if v.transcript and s.views.exchanges[1].id in _items(v))
    assert time.monotonic() - start < 2 and not release.is_set()  # shown while the round still runs
    assert "queued" in _items(carried)[s.views.exchanges[1].id]["user"]
    release.set()
    list(streaming)
    assert s.views.exchanges[0].reply.phase is Phase.DONE


def test_a_reload_keeps_what_streamed_and_a_message_not_answered_yet_as_typed():
    fake, s, streaming = _streaming()
    s.note_sent("second")
    saved = s.saved()  # what the page writes when "second" is sent
    partial = s.views.exchanges[0].reply.renderer.text
    assert partial and (REPLY_TEXT * 50).startswith(partial)  # two updates in: some of the reply
    first, second = saved["exchanges"]
    assert (first["message"], first["text"], first["kept"], first["note"]) == ("first", partial, True, RELOADED_NOTE)
    assert second == {"message": "second", "note": "not answered: the page was reloaded while it waited"}
    # what streamed is in what the model sees after the reload (Continue writes it on)
    assert saved["history"] == [{"role": "user", "content": "first"}, {"role": "assistant", "content": partial}]
    s.close()
    list(streaming)
    after = ChatSession(FakeService())
    shown = feed_messages(after.restore(saved).transcript)
    assert [m["role"] for m in shown] == ["user", "assistant", "user"] and "not answered" in shown[2]["content"]
    assert after.history == saved["history"]


def test_a_long_prefill_of_a_kept_conversation_announces_the_tokens_its_bar_counts():
    """7,072 prompt tokens of which 5,098 are new (1,973 kept from the conversation, and the last
    one the first round feeds): the announcement names both counts, as the bar counts 5,098."""
    events = [PrefillEvent("target", 0, 5098, 7072, 3.0, None), PrefillEvent("target", 128, 5098, 7072, 1290.0, 50_000.0)]
    s = ChatSession(_prefill_stream(events), text_interval_s=0.0)
    toasts = [t for v in run(s) for t in v.toasts]
    assert toasts == [("info", "The prompt (your message with the conversation and the system prompt) is 7,072 tokens, "
                               "5,098 of them new (1,973 kept from the conversation): reading the new ones takes about "
                               "51 s on this machine before the reply starts (measured here). Stop cancels it.")]
