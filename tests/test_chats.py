"""Several chats in one browser (specchat.ui.session.chats and ChatSession's New / switch /
Delete / Undo): hand-written conversations and the fake service's scripted reply."""

from __future__ import annotations

from test_app import REPLY_TEXT, FakeService
from test_session import settings

from specchat.ui.session.chat import ChatSession
from specchat.ui.session.chats import MAX_CHATS, NEW_TITLE, ChatShelf, title_of


def _session() -> ChatSession:
    return ChatSession(FakeService(), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)


def _say(session: ChatSession, message: str) -> None:
    list(session.respond(message, settings()))


def _messages(session: ChatSession) -> list[str]:
    return [e.message for e in session.views.exchanges]


def test_titles_are_the_first_message_on_one_line():
    assert title_of(None) == title_of({}) == NEW_TITLE
    assert title_of({"exchanges": [{"message": "  How do\nlighthouses   work? "}]}) == "How do lighthouses work?"
    long = "x" * 60
    assert title_of({"exchanges": [{"message": long}]}) == "x" * 47 + "…"
    # a tester: "Why does this code print the wrong total? ```py…" as a title
    pasted = "Why does this code print the wrong total?\n```py\ntotal = 0\n```"
    assert title_of({"exchanges": [{"message": pasted}]}) == "Why does this code print the wrong total?"
    assert title_of({"exchanges": [{"message": "```py\nx = 1\n```"}]}) == "py x = 1"
    assert title_of({"exchanges": [{"message": "## What does `is_palindrome` do, **exactly**?"}]}) == (
        "What does is_palindrome do, exactly?")


def test_new_switch_and_back_keep_each_conversation_and_what_the_model_sees():
    s = _session()
    _say(s, "about cats")
    first = s.shelf.active
    s.new_chat()
    assert _messages(s) == [] and s.history == [] and s.shelf.active != first
    _say(s, "about dogs")
    second = s.shelf.active
    assert s.switch_chat(first) is not None
    assert _messages(s) == ["about cats"]
    assert s.history == [{"role": "user", "content": "about cats"}, {"role": "assistant", "content": REPLY_TEXT}]
    _say(s, "more cats")
    s.switch_chat(second)
    assert _messages(s) == ["about dogs"] and [m["content"] for m in s.history] == ["about dogs", REPLY_TEXT]
    assert {title for title, _ in s.shelf.choices()} == {"about cats", "about dogs"}
    assert s.switch_chat(second) is None and s.switch_chat("no such chat") is None


def test_a_new_chat_on_an_empty_one_does_not_pile_up_empty_chats():
    s = _session()
    s.new_chat()
    s.new_chat()
    assert len(s.shelf.chats) == 1
    # a tester's list had two "New chat" entries: New, then another chat shown, then New again
    _say(s, "about cats")
    cats = s.shelf.active
    s.new_chat()
    assert s.switch_chat(cats) is not None  # the empty new chat is left: it leaves the list
    s.new_chat()
    assert [t for t, _ in s.shelf.choices()] == [NEW_TITLE, "about cats"]
    s.shelf.rename("kept for later")  # a named one stays, empty or not
    assert s.switch_chat(cats) is not None
    assert [t for t, _ in s.shelf.choices()] == ["kept for later", "about cats"]


def test_delete_then_undo_brings_the_chat_back_and_clear_can_be_undone():
    s = _session()
    _say(s, "keep me")
    kept = s.shelf.active
    s.new_chat()
    _say(s, "delete me")
    gone = s.shelf.active
    s.delete_chat()
    assert s.shelf.active == kept and _messages(s) == ["keep me"] and s.shelf.get(gone) is None
    s.undo()
    assert s.shelf.active == gone and _messages(s) == ["delete me"] and s.shelf.undo is None
    assert s.undo() is None  # nothing left to undo
    s.clear()
    assert _messages(s) == [] and s.history == []
    s.undo()
    assert _messages(s) == ["delete me"] and [m["content"] for m in s.history] == ["delete me", REPLY_TEXT]


def test_the_list_survives_the_browser_and_a_tampered_one_starts_fresh():
    s = _session()
    _say(s, "one")
    s.new_chat()
    _say(s, "two")
    s.shelf.rename("  my   second chat ")
    state, saved = s.shelf.state(), s.saved()
    again = _session()
    again.restore(saved)
    again.shelf = ChatShelf.parse(state)
    assert again.shelf.active == s.shelf.active and _messages(again) == ["two"]
    assert [t for t, _ in again.shelf.choices()] == ["my second chat", "one"]
    first_id = next(i for t, i in again.shelf.choices() if t == "one")
    again.switch_chat(first_id)
    assert _messages(again) == ["one"]
    for bad in (None, "x", {"version": 2}, {"version": 1, "chats": [{"id": 3}]}):
        shelf = ChatShelf.parse(bad)
        assert len(shelf.chats) == 1 and shelf.current.title == NEW_TITLE
    broken = {**state, "chats": [{**c, "saved": {"version": 1, "history": "no"}} for c in state["chats"]]}
    assert all(c.saved in (None, {}) for c in ChatShelf.parse(broken).chats)  # a bad copy is not restored


def test_changing_chats_is_refused_while_a_reply_streams_and_the_list_is_capped():
    s = ChatSession(FakeService(delay_s=0.05), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    stream = s.respond("slow", settings())
    next(stream)
    assert s.new_chat() is None and s.delete_chat() is None and s.undo() is None
    stream.close()
    shelf = ChatShelf()
    for i in range(MAX_CHATS + 5):
        shelf.new({"version": 1, "exchanges": [{"message": f"m{i}"}]})
    assert len(shelf.chats) == MAX_CHATS


def test_the_chat_dropped_beyond_the_limit_is_the_least_recently_active_not_the_one_just_used():
    """40 chats, the oldest switched to and used, then New: that chat stays, the next oldest goes."""
    shelf, clock = ChatShelf(), iter(range(1, 1000))
    import specchat.ui.session.chats as chats_module

    real = chats_module.time.time
    chats_module.time.time = lambda: float(next(clock))
    try:
        for i in range(MAX_CHATS):
            shelf.new({"version": 1, "exchanges": [{"message": f"m{i}"}]})
        oldest = min(shelf.chats, key=lambda c: c.updated)
        used = f"{oldest.title} again"
        shelf.switch(oldest.id, {})
        shelf.new({"version": 1, "exchanges": [{"message": used}]})
    finally:
        chats_module.time.time = real
    titles = [c.title for c in shelf.chats]
    assert len(titles) == MAX_CHATS and used in titles and shelf.get(shelf.active) is not None


def test_an_undo_is_withdrawn_by_the_next_message_and_never_overwrites_a_conversation():
    s = _session()
    _say(s, "cleared one")
    s.clear()
    s.note_sent("new one")  # the page notes a message as it is sent
    assert s.shelf.undo is None and s.undo() is None  # nothing to undo any more
    # and even an Undo kept past new messages sets the cleared chat beside them, not over them
    t = _session()
    _say(t, "first")
    t.shelf.cleared(t.saved())
    t.clear()
    _say(t, "second")
    t.undo()
    assert _messages(t) == ["first"]
    other = next(i for title, i in t.shelf.choices() if title == "second")
    t.switch_chat(other)
    assert _messages(t) == ["second"]


def test_deleting_an_empty_chat_keeps_the_undo_of_a_real_one():
    s = _session()
    _say(s, "precious")
    s.delete_chat()  # an empty chat is active now
    s.new_chat()
    s.delete_chat()  # deleting the empty one
    s.undo()
    assert _messages(s) == ["precious"]


def test_a_chat_shown_again_in_the_same_tab_keeps_its_replies_colours_not_restored_text():
    """Switching back (or Undo after Delete or Clear) within one tab shows the replies as they were:
    their events, so the token colours, charts and inspector; after a reload, text only."""
    s = _session()
    _say(s, "about cats")
    cats, reply = s.shelf.active, s.views.exchanges[0].reply
    s.new_chat()
    _say(s, "about dogs")
    s.switch_chat(cats)
    (shown,) = s.views.exchanges
    assert shown.reply is reply and shown.restored is None and s.views.reply_count == 1
    assert "tok-" in str(shown.item()["reply"]["blocks"]) and "restored" not in shown.item()["reply"]["notices"]
    assert s.history == [{"role": "user", "content": "about cats"}, {"role": "assistant", "content": REPLY_TEXT}]
    _say(s, "more cats")  # numbered after the kept ones
    assert [e.reply.number for e in s.views.exchanges] == [1, 2]
    s.delete_chat()
    s.undo()
    assert [e.reply.number for e in s.views.exchanges] == [1, 2] and s.views.exchanges[0].reply is reply
    s.clear()
    s.undo()
    assert s.views.exchanges[0].reply is reply
    # a copy from the browser (a reload) is another object: its replies come back as text
    fresh = _session()
    fresh.restore(s.saved())
    assert fresh.views.exchanges[0].reply is None and fresh.views.exchanges[0].restored.text == REPLY_TEXT


def test_clear_while_a_reply_streams_then_undo_brings_it_back_as_the_model_sees_it():
    """Clear is allowed mid-reply; Undo then shows the copy taken at Clear (the reply cut short, in
    the history, Continue-able), not the stopped reply's live record (which went on a little)."""
    s = ChatSession(FakeService(delay_s=0.01), text_interval_s=0, stats_interval_s=0, plot_interval_s=0)
    stream = s.respond("Tell a story.", settings())
    while not s.views.exchanges or not s.views.exchanges[-1].reply.renderer.text:
        next(stream)
    s.clear()
    stream.close()
    s.undo()
    (back,) = s.views.exchanges
    assert back.reply is None and back.kept and REPLY_TEXT.startswith(back.restored.text)
    assert s.history[-1] == {"role": "assistant", "content": back.restored.text}
    assert s.last.continue_().message == "Tell a story."


def test_showing_a_chat_does_not_move_it_in_the_list_a_new_message_does(monkeypatch):
    """The list is ordered by the last change (LM Studio, Open WebUI): a click on a chat leaves every
    chat where it is, so nothing moves under the pointer; a message sent in it brings it to the top."""
    import specchat.ui.session.chats as chats_module

    clock = iter(range(1, 1000))
    monkeypatch.setattr(chats_module.time, "time", lambda: float(next(clock)))
    copy = lambda *messages: {"version": 1, "history": [{"role": "user", "content": m} for m in messages],  # noqa: E731
                              "exchanges": [{"message": m} for m in messages]}
    shelf = ChatShelf()
    a = shelf.active
    shelf.new(copy("a"))  # a kept in the list, a new empty chat active
    b = shelf.active
    shelf.new(copy("b"))
    shelf.new(copy("c"))
    titles = lambda: [t for t, _ in shelf.choices()]  # noqa: E731
    assert titles() == [NEW_TITLE, "c", "b", "a"]
    shelf.switch(a, {})  # the empty new chat is left: it leaves the list, the others stay where they are
    assert titles() == ["c", "b", "a"]
    shelf.switch(b, copy("a"))  # a shown, left as it was
    assert titles() == ["c", "b", "a"]
    shelf.switch(a, copy("b", "b2"))  # a message sent in b: b goes to the top
    assert titles() == ["b", "c", "a"]
    # a reload: the list as the browser kept it, the active chat's copy noted again; nothing moves,
    # not even when the chat is left afterwards unchanged
    shelf = ChatShelf.parse(shelf.state())
    shelf.note_active(copy("a"))
    assert titles() == ["b", "c", "a"]
    shelf.switch(b, copy("a"))
    assert titles() == ["b", "c", "a"]
    # a message in the active chat moves it up at once (the page notes the copy on Send)
    shelf.note_active(copy("b", "b2", "b3"))
    shelf.switch(a, copy("b", "b2", "b3"))
    shelf.note_active(copy("a", "a2"))
    assert titles() == ["a", "b", "c"]


def test_a_new_chat_starts_without_a_system_prompt_and_a_switch_shows_each_chats_own():
    """Two testers: one set "Always answer in German.", sent, emptied the box and pressed New chat:
    the box came back with the German prompt and the next reply was in German; the other expected a
    new chat without the last one's prompt. A new chat starts empty, its system prompt too."""
    import dataclasses

    from specchat.ui.page import app

    demo = app.build_ui(FakeService(delay_s=0.0))
    fn = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "new_chat")
    handlers, request = fn.__self__, type("R", (), {"session_hash": "prompt-test"})()
    session = handlers.session_of(request)
    list(session.respond("What is a mutex?", dataclasses.replace(settings(), system_prompt="Always answer in German.")))
    german = session.shelf.active
    out = handlers.new_chat(request=request)
    assert out[handlers.page.system_prompt] == ""  # the new chat's own: none
    assert session.conversation.system_prompt == "" and session.saved().get("system_prompt", "") == ""
    list(session.respond("What is a semaphore?", settings()))
    assert session.conversation.system_prompt == ""
    out = handlers.switch_chat(german, request=request)
    assert out[handlers.page.system_prompt] == "Always answer in German."  # the chat's own
    assert session.conversation.system_prompt == "Always answer in German."
