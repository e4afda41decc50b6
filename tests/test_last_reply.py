"""Regenerate, Edit and Continue on the last reply; the settings and the chat kept in the browser;
the export. Values are hand-written messages and the fake service's scripted reply (REPLY_TEXT),
and on the real model, greedy text against greedy text."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from test_app import REPLY_TEXT, SCRIPT, FakeService
from test_session import settings

from specchat.conversation import Conversation, ReplySettings
from specchat.core.events import DoneEvent, StopReason, TokenEvent, TokenKind
from specchat.ui.session.chat import ChatSession
from specchat.ui.session.export import export_json, export_markdown
from specchat.ui.session.last_reply import EDITED_NOTE, REGENERATED_NOTE
from specchat.ui.session.saved import kept_prompt, parse_settings, restore_state, settings_state


def _drain(session, message, ticket=None, **kw):
    views = list(session.respond(message, settings(**kw), ticket))
    return views[-1]


def _token(text: str) -> TokenEvent:
    return TokenEvent(token_id=1, kind=TokenKind.TARGET, text=text, target_prob=1.0, draft_prob=None,
                      rejected_token_id=None, rejected_target_prob=None, rejected_draft_prob=None, round_index=0,
                      position=0, num_drafted=0)


def _done(reason: StopReason) -> DoneEvent:
    return DoneEvent(reason, (), (), "", 0.0, 0.0, 0)


# -- the conversation's rules ------------------------------------------------------------------
def test_take_back_and_continuation_keep_what_the_model_sees_right():
    c = Conversation(seed=7)
    c.restore([{"role": "user", "content": "a"}, {"role": "assistant", "content": "A"},
               {"role": "user", "content": "b"}, {"role": "assistant", "content": "B1"}])
    turn = c.begin_continuation(settings())
    assert (turn.message, turn.continue_from) == ("b", "B1")
    assert turn.history == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "A"}]
    assert turn.config.seed == 7 + 2  # the third reply asked for in this conversation
    turn.add(_token("B2"))
    turn.add(_done(StopReason.MAX_NEW_TOKENS))
    assert c.finish(turn)
    assert c.messages[-1] == {"role": "assistant", "content": "B1B2"} and len(c) == 2
    assert c.take_back() == {"role": "user", "content": "b"}
    assert c.messages == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "A"}]


def test_a_continuation_that_fails_or_writes_nothing_puts_the_reply_back_as_it_was():
    c = Conversation(seed=1)
    c.restore([{"role": "user", "content": "q"}, {"role": "assistant", "content": "half"}])
    turn = c.begin_continuation(settings())
    assert c.messages == []
    turn.add(_done(StopReason.CANCELLED))  # stopped before a token
    assert not c.finish(turn)
    assert c.messages == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "half"}]
    with pytest.raises(ValueError, match="no reply to continue"):
        Conversation().begin_continuation(settings())


# -- the session: Regenerate, Edit, Continue ---------------------------------------------------
def test_regenerate_keeps_the_old_reply_marked_and_sends_the_message_again_with_the_new_drafter():
    service = FakeService()
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "Write code.", drafter="ngram")
    resend = session.last.regenerate()
    assert resend.message == "Write code." and resend.ticket is not None
    old = session.views.exchanges[0]
    assert old.note == REGENERATED_NOTE and not old.kept
    assert session.history == []  # the old turn left what the model sees
    _drain(session, resend.message, resend.ticket, drafter="int4")
    assert service.calls[1]["history"] == [] and service.calls[1]["drafter"] == "int4"
    assert session.history == [{"role": "user", "content": "Write code."}, {"role": "assistant", "content": REPLY_TEXT}]
    assert [r.drafter for r in session.views.replies] == ["ngram", "int4"]  # two rows to compare
    # Edit then takes the regenerated exchange back: the old reply no longer says "regenerated below"
    view = session.last.edit()
    assert view.textbox == "Write code." and session.views.exchanges == [old] and old.note == EDITED_NOTE
    assert [item["id"] for item in view.transcript["items"]] == [old.id, old.id + 1]  # the note, and the one removed


def test_edit_takes_the_last_exchange_back_and_refuses_while_a_reply_streams():
    session = ChatSession(FakeService(delay_s=0.05), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "first")
    _drain(session, "second")
    assert "#2" in session.views.stats()
    view = session.last.edit()
    assert view.textbox == "second" and [e.message for e in session.views.exchanges] == ["first"]
    assert "#1" in view.stats and "#2" not in view.stats  # the stats line shows the reply now latest
    assert [m["content"] for m in session.history] == ["first", REPLY_TEXT]
    taken_back = next(item["id"] for item in view.transcript["items"] if item.get("removed"))
    # sent again at once (within the 5 s a reply that just ended rides along with the next one's
    # first update): the exchange taken back is not drawn again (it was, next to the new one)
    views = list(session.respond("second, edited", settings()))
    drawn = {item["id"] for v in views if v.transcript for item in v.transcript["items"]}
    assert taken_back not in drawn and [e.message for e in session.views.exchanges] == ["first", "second, edited"]
    stream = session.respond("third", settings())
    next(stream)  # streaming now
    refused = session.last.edit()
    assert refused.transcript is None and "Stop" in refused.toasts[0][1]
    assert session.last.regenerate().message is None and session.last.continue_().message is None
    stream.close()


def test_an_edited_message_sent_replaces_the_exchange_it_was_put_back_from():
    """↑ or Edit leave the exchange until the edited message is sent (keys.js); the send names the
    exchange it edits: taken back only while it is still the last one."""
    from specchat.ui.page import app

    demo = app.build_ui(FakeService(delay_s=0.01))
    take = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "take_message")
    handlers = take.__self__
    request = type("R", (), {"session_hash": "edit-test"})()
    session = handlers.session_of(request)
    _drain(session, "first")
    _drain(session, "second")
    second = session.views.exchanges[-1]
    # the page sends "second, edited" naming the exchange of "second": it leaves the page and the model's history
    out = handlers.take_message("second, edited", str(second.id), request=request)
    assert out[handlers.page.editing] == "" and out[handlers.page.pending] == "second, edited"
    assert [e.message for e in session.views.exchanges] == ["first", "second, edited"]  # shown at once
    assert [m["content"] for m in session.history] == ["first", REPLY_TEXT]
    assert f'"id": {second.id}, "removed": true' in json.dumps(out[handlers.page.transcript])
    _drain(session, "second, edited", out[handlers.page.ticket])
    assert [e.message for e in session.views.exchanges] == ["first", "second, edited"]
    # an id that is no longer the last exchange's: nothing is taken back, the message is a new one
    view = session.last.edit(session.views.exchanges[0].id)
    assert view.transcript is None and "no longer the last one" in view.toasts[0][1]
    assert len(session.views.exchanges) == 2 and len(session.history) == 4
    # an edited message sent while a reply streams (Regenerate was pressed meanwhile): sent after it, as a new one
    stream = session.respond("busy", settings())
    next(stream)
    refused = session.last.edit(session.views.exchanges[-1].id)
    assert refused.transcript is None and refused.toasts[0][1].startswith("A reply is being written")
    stream.close()
    out = handlers.take_message("third", "", request=request)  # not editing: nothing taken back
    assert handlers.page.transcript not in out and [e.message for e in session.views.exchanges][1:] == [
        "second, edited", "busy", "third"]


def test_editing_a_message_stop_cancelled_replaces_it():
    session = ChatSession(FakeService(delay_s=0.02), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    stream = session.respond("first", settings())
    next(stream)
    waiting = session.note_sent("second")  # behind the streaming reply
    assert waiting.waits
    session.stop()  # the waiting message is cancelled: shown, never answered
    list(stream)
    list(session.respond("second", settings(), waiting.ticket))  # the page's reply step for it: nothing to do
    tail, history = session.views.exchanges[-1], session.history
    assert tail.message == "second" and tail.reply is None
    view = session.last.edit(tail.id)
    assert view.textbox == "second" and view.transcript["items"] == [{"id": tail.id, "removed": True}]
    assert [e.message for e in session.views.exchanges] == ["first"] and session.history == history


def _stopped_with_a_cancelled_message_below() -> ChatSession:
    """A session whose reply to "first" was stopped after some text, with "second", sent while it
    streamed, cancelled by that Stop (shown, never answered)."""
    session = ChatSession(FakeService(delay_s=0.02), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    stream = session.respond("first", settings())
    next(stream)
    while not session.views.exchanges[0].reply.renderer.text:
        next(stream)
    waiting = session.note_sent("second")
    session.stop()
    list(stream)
    list(session.respond("second", settings(), waiting.ticket))
    return session


def test_editing_a_cancelled_message_with_a_continue_below_it_replaces_it():
    """A tester: Stop cancelled a waiting message, Continue wrote on the reply before (its bubble
    below the cancelled one), ↑ put the cancelled message in the box: sent, it was added as a new
    one beside the old, with a toast saying so, though the note had promised to replace it."""
    session = _stopped_with_a_cancelled_message_below()
    resend = session.last.continue_()
    _drain(session, resend.message, resend.ticket)
    first, continued, cancelled = session.views.exchanges  # (the cancelled message moved below the Continue)
    assert cancelled.reply is None and continued.continues and continued.kept
    history = session.history
    view = session.last.edit(cancelled.id)
    assert view.textbox == "second" and not view.toasts and view.transcript["items"] == [{"id": cancelled.id, "removed": True}]
    assert session.views.exchanges == [first, continued] and session.history == history


def test_a_continue_is_shown_right_below_its_reply_and_a_cancelled_message_moves_below_it():
    """A tester: Stop cancelled a waiting message; Continue on the reply above it put the
    continuation below the cancelled message, as if it answered it."""
    session = _stopped_with_a_cancelled_message_below()
    first, cancelled = session.views.exchanges
    old_id = cancelled.id
    resend = session.last.continue_()
    items = resend.view.transcript["items"]
    continuing = session.views.exchanges[1]
    assert session.views.exchanges == [first, continuing, cancelled] and continuing.continues
    assert first.id < continuing.id < cancelled.id and cancelled.id != old_id  # the page orders by id
    assert [i["id"] for i in items] == [continuing.id, cancelled.id, old_id] and items[-1] == {"id": old_id, "removed": True}
    assert items[1]["message"] == "second"  # still on the page, as typed
    _drain(session, resend.message, resend.ticket)
    assert [e.message for e in session.views.exchanges] == ["first", "first", "second"]
    assert session.history[-1]["role"] == "assistant"  # the cancelled message is not in what the model sees


def test_continue_writes_on_from_the_reply_and_the_model_sees_one_reply():
    service = FakeService()
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "Tell me more.", max_new_tokens=16)
    resend = session.last.continue_()
    assert resend.message == "Tell me more."
    _drain(session, resend.message, resend.ticket)
    call = service.calls[1]
    assert call["continue_from"] == REPLY_TEXT and call["history"] == [] and call["message"] == "Tell me more."
    assert session.history == [{"role": "user", "content": "Tell me more."},
                               {"role": "assistant", "content": REPLY_TEXT + REPLY_TEXT}]
    first, second = session.views.exchanges
    assert second.continues and second.kept and not first.kept
    assert "Continue" in second.item()["user"]
    # Regenerate after a Continue: the message sent again; the reply and its continuation both
    # leave what the model sees (the history is empty until the new reply ends)
    resend = session.last.regenerate()
    assert resend.message == "Tell me more." and session.history == [] and not first.kept and not second.kept
    assert first.note and "regenerated" in first.note
    _drain(session, resend.message, resend.ticket)
    assert session.history == [{"role": "user", "content": "Tell me more."}, {"role": "assistant", "content": REPLY_TEXT}]


def test_edit_after_a_continue_takes_back_the_reply_and_its_continuation():
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "First.", max_new_tokens=16)
    _drain(session, "Tell me more.", max_new_tokens=16)
    resend = session.last.continue_()
    _drain(session, resend.message, resend.ticket)
    kept_before = session.history[:2]
    view = session.last.edit()
    assert view.textbox == "Tell me more." and session.history == kept_before
    assert [e.message for e in session.views.exchanges] == ["First."]
    assert sorted(item["id"] for item in view.transcript["items"]) == [2, 3]  # both taken off the page


def test_continue_refuses_a_reply_that_ended_by_itself():
    """A tester pressed Continue on a reply the model had ended: each press added a Continue and an
    empty "nothing written" reply. Cut (max new tokens), stopped or cut short by a reload, it goes on."""
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "hello")  # 19 tokens of 256: the model's end of turn
    refused = session.last.continue_()
    assert refused.message is None and "ended by itself" in refused.view.toasts[0][1]
    assert len(session.views.exchanges) == 1 and not session.queue.busy
    _drain(session, "more", max_new_tokens=16)  # cut at max new tokens
    assert session.last.continue_().message == "more"


def test_continue_refuses_a_failed_reply():
    service = FakeService()
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    assert session.last.continue_().message is None  # nothing yet
    _drain(session, "hello")
    session.views.exchanges[-1].kept = False  # as a failed reply is
    assert session.last.continue_().message is None


# -- kept in the browser -----------------------------------------------------------------------
def test_settings_kept_in_the_browser_are_checked_one_by_one():
    kinds = ["none", "ngram", "int4"]
    saved = settings_state({"drafter": "ngram", "gamma": 5, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 2048,
                            "adaptive": False, "colours": "plain", "other": 1})
    assert "other" not in saved
    assert parse_settings(saved, kinds) == {"drafter": "ngram", "gamma": 5, "temperature": 0.7, "top_p": 0.9,
                                            "max_new_tokens": 2048, "adaptive": False, "colours": "plain"}
    bad = {**saved, "gamma": 2.5, "temperature": 9, "top_p": "1", "max_new_tokens": True, "adaptive": "no",
           "colours": "red", "drafter": "eagle"}
    assert parse_settings(bad, kinds) == {}
    assert parse_settings({**saved, "version": 99}, kinds) == {} and parse_settings("x", kinds) == {}
    assert parse_settings({**saved, "gamma": 6.0}, kinds)["gamma"] == 6  # a whole number sent as a float


def test_a_slider_box_typed_into_keeps_the_nearest_value_in_range_without_an_error():
    """Typing 48 into max new tokens sends 4 first (each keystroke is an .input): the kept settings
    hold the value the box shows once left (16, the range's low end), and no range check raises
    (its toast covered the page in CI, 12ae0d7)."""
    import asyncio

    from gradio.state_holder import SessionState

    from specchat.ui.page import app

    demo = app.build_ui(FakeService())
    keep = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "keep_settings"]
    assert len(keep) == 7  # one per control (the system prompt's box has its own listener)
    values = {"drafter": "ngram", "gamma": 12, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 4,
              "adaptive": True, "colours": "colours", "system_prompt": ""}

    def kept(**typed):
        out = asyncio.run(demo.process_api(block_fn=keep[4], inputs=list({**values, **typed}.values()),
                                           state=SessionState(demo), request=None))
        return out["data"][0]

    assert kept()["max_new_tokens"] == 16  # 4, below 16
    assert kept(max_new_tokens=48)["max_new_tokens"] == 48
    assert kept(max_new_tokens=99999)["max_new_tokens"] == 4096
    assert kept(gamma=2.6)["gamma"] == 3 and kept(temperature=-1)["temperature"] == 0.0
    assert "max_new_tokens" not in kept(max_new_tokens=None)  # the box emptied to type anew
    assert settings_state({"top_p": float("nan"), "gamma": True}) == {"version": 1}


def test_restoring_the_settings_keeps_the_sliders_range_checks():
    """Restoring a page's settings gives every control a value: an output left out is a props
    update, and Gradio then rebuilds the slider in the session without layout.bounded's check
    (a typed 2.5 for γ went through, and an out-of-range value got Gradio's unnamed message)."""
    import asyncio

    import gradio as gr
    from gradio.state_holder import SessionState

    from specchat.ui.page import app

    demo = app.build_ui(FakeService())
    restore = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "restore_settings")
    page = restore.fn.__self__.page
    for saved in (None, settings_state({"gamma": 5})):
        state = SessionState(demo)
        out = asyncio.run(demo.process_api(block_fn=restore, inputs=[saved], state=state, request=None))
        assert out["data"][:4] == [12 if saved is None else 5, 0.0, 1.0, 1024]  # the defaults, or what was kept
        with pytest.raises(gr.Error, match=r"max new tokens: 4 is out of range; allowed 16 to 4096"):
            state[page.max_new_tokens._id].preprocess(4)
        with pytest.raises(gr.Error, match="not a whole number"):
            state[page.gamma._id].preprocess(2.5)


def test_the_system_prompt_box_is_kept_as_typed_into_the_kept_settings():
    kinds = ["none", "ngram"]
    saved = settings_state({"gamma": 5, "colours": "plain"})
    kept = kept_prompt(saved, "Answer in French.\n  Be brief.")
    assert parse_settings(kept, kinds) == {"gamma": 5, "colours": "plain", "system_prompt": "Answer in French.\n  Be brief."}
    assert parse_settings(kept_prompt(None, ""), kinds) == {"system_prompt": ""}  # nothing kept before; emptied
    assert "system_prompt" not in parse_settings({**kept, "system_prompt": ["x"]}, kinds)
    assert "system_prompt" not in parse_settings({**kept, "system_prompt": "x" * 100_001}, kinds)


def test_an_unsent_system_prompt_survives_a_reload_and_wins_over_the_restored_chats():
    from specchat.ui.page import app

    demo = app.build_ui(FakeService())
    restore = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "restore")
    page = restore.__self__.page
    request = type("R", (), {"session_hash": "prompt-test"})()
    typed = kept_prompt(settings_state({}), "Only haiku.")
    assert restore({}, typed, request=request)[page.system_prompt] == "Only haiku."  # an empty chat: kept all the same
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    list(session.respond("q", ReplySettings("none", 4, False, 0.0, 1.0, 64, system_prompt="Be terse.")))
    request = type("R", (), {"session_hash": "prompt-test-2"})()
    assert restore(session.saved(), typed, request=request)[page.system_prompt] == "Only haiku."
    request = type("R", (), {"session_hash": "prompt-test-3"})()
    assert restore(session.saved(), None, request=request)[page.system_prompt] == "Be terse."  # none kept: the chat's


def test_a_reply_after_a_reload_is_numbered_after_the_highest_restored_number():
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "q")
    resend = session.last.regenerate()  # #2 replaces #1: the chat shows #1 (marked regenerated) and #2
    _drain(session, resend.message, resend.ticket)
    saved = session.saved()
    saved["exchanges"] = saved["exchanges"][1:]  # as a chat whose #1 is gone: #2 alone
    saved["history"] = saved["history"][-2:]
    fresh = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    assert restore_state(fresh.views, fresh.conversation, saved) and fresh.views.reply_count == 2
    _drain(fresh, "again")
    assert fresh.views.exchanges[-1].reply.label.startswith("#3 ")


def test_a_regenerated_and_a_continued_reply_survive_a_reload_with_their_marks():
    service = FakeService()
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "q", max_new_tokens=16)  # (cut at max new tokens: a reply Continue writes on)
    resend = session.last.regenerate()
    _drain(session, resend.message, resend.ticket, max_new_tokens=16)
    resend = session.last.continue_()
    _drain(session, resend.message, resend.ticket, max_new_tokens=16)
    saved = session.saved()
    fresh = ChatSession(FakeService())
    assert restore_state(fresh.views, fresh.conversation, saved)
    marks = [(e.note, e.kept, e.continues) for e in fresh.views.exchanges]
    assert marks == [(REGENERATED_NOTE, False, False), (None, False, False), (None, True, True)]
    assert fresh.history == [{"role": "user", "content": "q"}, {"role": "assistant", "content": REPLY_TEXT * 2}]
    resend = fresh.last.continue_()  # a restored reply continues too
    assert resend.message == "q"


# -- the export --------------------------------------------------------------------------------
def test_the_export_lists_every_exchange_with_its_figures():
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "Say it.", drafter="ngram")
    session.last.regenerate()
    when = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)
    data = export_json(session.views, session.conversation, target="tiny", now=when)
    assert data["exported_at"] == "2026-12-06T12:00:00+00:00" and data["history"] == []
    first, second = data["exchanges"]
    assert first["reply"]["text"] == REPLY_TEXT and first["reply"]["drafter"] == "ngram" and not first["kept"]
    figures = first["reply"]["figures"]
    assert figures["num_tokens"] == sum(len(tokens) for _, _, tokens in SCRIPT)
    assert figures["num_rounds"] == len(SCRIPT) and figures["num_drafted"] == sum(d for d, _, _ in SCRIPT)
    assert second["message"] == "Say it." and second["reply"] is None  # sent again, not answered yet
    md = export_markdown(data)
    assert md.startswith("# Conversation with tiny\n") and f"\n{REPLY_TEXT}\n" in md  # an export with no title
    assert f"_{REGENERATED_NOTE}_" in md and md.count("## You") == 2
    session.shelf.note_active(session.saved())  # as the page does when a message is sent: the chat named after it
    named = export_json(session.views, session.conversation, target="tiny", title=session.shelf.current.title, now=when)
    assert named["title"] == "Say it." and export_markdown(named).startswith("# Say it.\n\n_tiny, exported 2026-12-06")


def test_the_export_names_the_target_of_each_reply_after_a_model_switch():
    service = FakeService()
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    before = service.target_name
    _drain(session, "First.", drafter="ngram")
    service.target_name = "another-model"  # what ChatService.retarget does to the name
    _drain(session, "Second.", drafter="ngram")
    data = export_json(session.views, session.conversation, target=service.target_name)
    assert [e["reply"]["target"] for e in data["exchanges"]] == [before, "another-model"]
    headings = [line for line in export_markdown(data).splitlines() if line.startswith("### ")]
    assert headings[0].endswith(f" · target {before}") and "target" not in headings[1]


# -- on the real model ---------------------------------------------------------------------------
def test_continue_on_the_real_model_writes_what_one_longer_greedy_reply_writes(smollm2_service):
    """Greedy: a reply cut at 12 tokens and continued for 20 more is, as text, the first 32
    tokens' worth of the reply made in one go (the continuation's prompt ends inside the reply,
    with no end of turn)."""
    def greedy(n: int) -> ReplySettings:
        return ReplySettings("ngram", 4, False, 0.0, 1.0, n)

    message = "List the planets of the solar system in order, one per line."
    whole = Conversation(seed=0)
    list(whole.stream(smollm2_service.stream_chat, message, greedy(32)))
    cut = Conversation(seed=0)
    list(cut.stream(smollm2_service.stream_chat, message, greedy(12)))
    first = cut.messages[-1]["content"]
    turn = cut.begin_continuation(greedy(20))
    list(cut.stream_turn(turn, smollm2_service.stream_chat))
    assert len(first) > 10 and cut.messages[-1]["content"].startswith(first)
    assert cut.messages[-1]["content"] == whole.messages[-1]["content"]


def test_a_reload_mid_reply_keeps_what_streamed_and_continue_writes_it_on():
    service = FakeService(delay_s=0.01)
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    stream = session.respond("Tell a story.", settings())
    while not session.views.exchanges or not session.views.exchanges[-1].reply.renderer.text:
        next(stream)
    partial = session.views.exchanges[-1].reply.renderer.text
    saved = session.saved()  # what the browser holds when the page reloads now
    stream.close()
    assert 0 < len(partial) < len(REPLY_TEXT) and REPLY_TEXT.startswith(partial)
    fresh = ChatSession(FakeService())
    assert restore_state(fresh.views, fresh.conversation, saved)
    (kept,) = fresh.views.exchanges
    assert kept.kept and kept.restored.text == partial and "reloaded" in kept.note
    assert fresh.history == [{"role": "user", "content": "Tell a story."}, {"role": "assistant", "content": partial}]
    assert fresh.last.continue_().message == "Tell a story."


def test_a_reload_while_a_continue_streams_keeps_one_reply_for_the_model():
    service = FakeService(delay_s=0.01)
    session = ChatSession(service, text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "Tell a story.", max_new_tokens=16)
    resend = session.last.continue_()
    stream = session.respond(resend.message, settings(), resend.ticket)
    while not session.views.exchanges[-1].reply or not session.views.exchanges[-1].reply.renderer.text:
        next(stream)
    partial = session.views.exchanges[-1].reply.renderer.text
    saved = session.saved()
    stream.close()
    assert saved["history"] == [{"role": "user", "content": "Tell a story."},
                                {"role": "assistant", "content": REPLY_TEXT + partial}]
    assert [(e["kept"], e["continues"]) for e in saved["exchanges"]] == [(False, False), (True, True)]
    fresh = ChatSession(FakeService())
    assert restore_state(fresh.views, fresh.conversation, saved)
    assert fresh.last.continue_().message == "Tell a story."


def test_a_message_stop_cancelled_does_not_block_the_last_reply_actions():
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    _drain(session, "hello")
    session.note_sent("never sent")
    session.stop()  # cancels the waiting message: a note-only bubble is last now
    list(session.respond("never sent", settings()))
    assert session.views.exchanges[-1].reply is None
    resend = session.last.regenerate()
    assert resend.message == "hello"  # the reply above it, not the cancelled message


def test_the_markdown_export_closes_a_code_block_a_cut_reply_left_open():
    from specchat.ui.session.export import export_markdown

    data = {"target": "t", "exported_at": "now", "system_prompt": "", "exchanges": [
        {"message": "code?", "continues": False, "note": "", "reply": {"label": "#1", "text": "```python\nx = 1"}},
        {"message": "next", "continues": False, "note": "", "reply": None}]}
    md = export_markdown(data)
    assert "```python\nx = 1\n```\n" in md and md.rindex("## You") > md.index("x = 1\n```")


def test_the_markdown_export_says_where_a_reply_was_cut_and_keeps_a_messages_line_breaks():
    """A tester: a reply cut at max tokens ended mid-word with no note; a restored reply lost its
    figures line; a Shift+Enter line break in a message read as one line in Markdown."""
    data = {"target": "t", "exported_at": "now", "system_prompt": "", "exchanges": [
        {"message": "Two lines:\nfirst\nsecond\n\n```py\na = 1\nb = 2\n```", "continues": False, "note": "",
         "reply": {"label": "#1", "text": "It was cut mid-wo", "status": "stopped: max new tokens reached"}},
        {"message": "again", "continues": False, "note": "",
         "reply": {"label": "#2", "text": "Done.", "status": "", "summary": "5 tokens · α 0.80", "restored": True}}]}
    md = export_markdown(data)
    assert "## You\n\nTwo lines:  \nfirst  \nsecond\n\n```py\na = 1\nb = 2\n```\n" in md  # code lines untouched
    assert "It was cut mid-wo\n\n_stopped: max new tokens reached_\n" in md
    assert "### #2\n\n_5 tokens · α 0.80_\n\nDone.\n" in md and md.count("_stopped") == 1


def test_the_model_sizes_are_read_when_a_drafter_is_prepared_not_during_a_reply(smollm2_service):
    """Reading a GGUF header takes ~1 s of CPU: done while the drafter loads, it is not taken from
    the first reply's decoding (2 cores: llama.cpp's two threads would wait on it)."""
    from specchat.runtimes.llamacpp import gguf_model_size

    smollm2_service._sizes.clear()
    smollm2_service.prepare_drafter("none")
    assert smollm2_service._sizes == {"target": gguf_model_size(smollm2_service.target_path)}


def test_a_file_that_is_not_a_model_leaves_the_loaded_one(smollm2_service, tmp_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf at all" * 100)
    before = smollm2_service.target_name
    with pytest.raises(Exception, match="GGUF|magic"):
        smollm2_service.retarget(str(garbage))
    assert smollm2_service.target_name == before and smollm2_service.engine is not None
    conversation = Conversation(seed=0)
    list(conversation.stream(smollm2_service.stream_chat, "Say hi.", ReplySettings("none", 4, False, 0.0, 1.0, 4)))
    assert conversation.messages[-1]["content"]  # it still answers


def test_a_continue_cut_inside_code_exports_as_one_reply_and_restores_as_code():
    """The reply cut inside a code block and its continuation: one text in the Markdown export (the
    fence closed once, at the end), and after a reload the continuation's bubble is code again."""
    from specchat.ui.session.export import export_markdown

    first, more = "Here:\n\n```python\nx = 1\ny = ", "2\n```\nDone."
    data = {"target": "t", "exported_at": "now", "system_prompt": "", "exchanges": [
        {"message": "code?", "continues": False, "note": "", "reply": {"label": "#1", "text": first}},
        {"message": "code?", "continues": True, "note": "", "reply": {"label": "#2", "text": more}}]}
    md = export_markdown(data)
    assert "```python\nx = 1\ny = 2\n```\nDone.\n" in md and md.count("```") == 2
    assert "_continued: #2_" in md and "## Continue" not in md
    saved = {"version": 1, "system_prompt": "", "history": [
        {"role": "user", "content": "code?"}, {"role": "assistant", "content": first + more}],
        "exchanges": [{"message": "code?", "label": "#1", "text": first, "kept": False},
                      {"message": "code?", "label": "#2", "text": more, "kept": True, "continues": True}]}
    fresh = ChatSession(FakeService())
    assert restore_state(fresh.views, fresh.conversation, saved)
    blocks = fresh.views.exchanges[1].item()["reply"]["blocks"]
    assert isinstance(blocks[0], dict) and blocks[0]["head"].startswith('<div class="spec-code" data-lang="python">')
    first_line = blocks[0]["lines"][0]  # the line it was cut on, "y = " muted (the reply above's), then its "2"
    assert re.sub(r"<[^>]+>", "", first_line) == "y = 2" and 'class="spec-lead"' in first_line
    assert "Done." in blocks[1] and fresh.saved()["exchanges"][1]["text"] == more  # the lead is not saved
    assert "lead" not in fresh.saved()["exchanges"][1]
    # live: Continue of a restored reply cut inside the code block streams its reply as code
    cut = {"version": 1, "system_prompt": "", "history": saved["history"][:1] + [{"role": "assistant", "content": first}],
           "exchanges": [{"message": "code?", "label": "#1", "text": first, "kept": True,
                          "status": "stopped: max new tokens reached"}]}
    live = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    assert restore_state(live.views, live.conversation, cut)
    resend = live.last.continue_()
    list(live.respond(resend.message, settings(), resend.ticket))
    reply = live.views.exchanges[-1].reply
    assert reply.renderer.text == REPLY_TEXT and reply.renderer.lead == "```python\ny = "
    assert isinstance(reply.parts()["blocks"][0], dict)  # the continuation's text is inside the code block


def test_a_reload_mid_reply_restores_what_the_closed_tab_held_not_the_older_browser_copy():
    """The browser's copy is rewritten every few seconds while a reply streams; the page reopened
    after a reload gets what the old tab's session held when it went (its unload), or holds still
    (the unload can come after the new page's load), once, and writes it back to the browser."""
    from specchat.ui.session.store import SessionStore

    store = SessionStore(lambda: ChatSession(FakeService(delay_s=0.01), text_interval_s=0, stats_interval_s=0,
                                             plot_interval_s=0))
    old = store.get("tab-1")
    stream = old.respond("Tell a story.", settings())
    while not old.views.exchanges or not old.views.exchanges[-1].reply.renderer.text:
        next(stream)
    browser_copy = old.saved()  # the last save tick: an early part of the reply
    early = browser_copy["exchanges"][0]["text"]
    for _ in range(6):  # the reply goes on after the browser's copy was written
        next(stream)
    later = old.views.exchanges[-1].reply.renderer.text
    assert len(later) > len(early) and browser_copy["key"] == old.copy_key
    # the new page's load before the old tab's unload: the live session's copy
    new = store.get("tab-2")
    assert store.freshest(browser_copy, new)["exchanges"][0]["text"].startswith(later)
    store.drop("tab-1")  # the unload: its reply stops, what it held is kept
    stream.close()
    restored = store.freshest(browser_copy, new)
    assert restored["exchanges"][0]["text"].startswith(later) and restored["history"][-1]["content"].startswith(later)
    assert store.freshest(browser_copy, new) is browser_copy  # taken once
    assert new.copy_key != old.copy_key  # the new tab writes copies of its own
    assert store.freshest({"version": 1, "key": "someone-else"}, new) == {"version": 1, "key": "someone-else"}
    assert store.freshest("not a dict", new) == "not a dict"


def test_regenerate_answers_a_last_message_left_unanswered_by_a_reload():
    """The page reloaded while the last message waited ("not answered"): Regenerate sends that
    message, in its place, not the one answered before it."""
    from specchat.ui.session.saved import SAVED_VERSION

    saved = {"version": SAVED_VERSION, "system_prompt": "",
             "history": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}],
             "exchanges": [{"message": "q1", "label": "#1 · none", "summary": "", "text": "a1"},
                           {"message": "q2", "note": "not answered: the page was reloaded while it waited"}]}
    session = ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    assert session.restore(saved) is not None
    old = session.views.exchanges[1]
    resend = session.last.regenerate()
    assert resend.message == "q2" and [i.get("removed") for i in resend.view.transcript["items"]] == [None, True]
    _drain(session, resend.message, resend.ticket)
    assert [e.message for e in session.views.exchanges] == ["q1", "q2"] and old not in session.views.exchanges
    assert session.views.exchanges[0].note is None  # the answered one is not marked regenerated
    assert session.history[:2] == saved["history"] and session.history[2] == {"role": "user", "content": "q2"}
