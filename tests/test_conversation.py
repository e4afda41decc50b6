"""The conversation every chat surface shares (specchat/conversation.py): what the model sees,
which turns are kept, and the seed and settings of each reply.

First principles: the history the service is called with is exactly the system prompt and the
kept turns written out by hand; a kept reply's text is the scripted stream's own text (the
FakeService's REPLY_TEXT, independent of the code under test); the seeds are the arithmetic
of the rule. The page, the terminal chat and the scripted chat are then shown to send the same
history for the same turns.
"""

from __future__ import annotations

import threading

import pytest
from test_app import REPLY_TEXT, SCRIPT, FakeService

from specchat.conversation import Conversation, ReplySettings
from specchat.core.events import DoneEvent, StopReason, TokenEvent

SETTINGS = ReplySettings("ngram", 4, False, 0.0, 1.0, 64)
FIRST_TOKEN = SCRIPT[0][2][0][0]  # the scripted reply's first token's text


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def test_each_turn_is_sent_with_the_system_prompt_and_the_kept_turns():
    fake = FakeService()
    c = Conversation(system_prompt="ignored: the reply's settings say")
    settings = ReplySettings("ngram", 4, False, 0.0, 1.0, 64, system_prompt="Be brief.")
    list(c.stream(fake.stream_chat, "one", settings))
    list(c.stream(fake.stream_chat, "two", settings))
    system = {"role": "system", "content": "Be brief."}
    assert fake.calls[0]["history"] == [system]
    assert fake.calls[1]["history"] == [system, user("one"), assistant(REPLY_TEXT)]
    assert c.messages == [user("one"), assistant(REPLY_TEXT), user("two"), assistant(REPLY_TEXT)]
    assert len(c) == 2 and fake.calls[1]["drafter"] == "ngram"


def test_a_failed_turn_is_not_kept_and_the_error_reaches_the_caller():
    fake = FakeService()
    c = Conversation()
    with pytest.raises(ValueError, match="on purpose"):
        list(c.stream(fake.stream_chat, "boom", SETTINGS))
    assert c.messages == []


def test_a_turn_stopped_before_its_first_token_is_not_kept_one_stopped_after_it_is():
    fake = FakeService()
    c = Conversation()
    stopped = threading.Event()
    stopped.set()  # Stop pressed while the prompt was read: the stream ends with no token
    events = list(c.stream(fake.stream_chat, "first", SETTINGS, cancel=stopped))
    assert isinstance(events[-1], DoneEvent) and events[-1].stop_reason is StopReason.CANCELLED
    assert c.messages == []
    # Stop after the first round: the partial reply is kept, as the engine committed it
    cancel = threading.Event()
    for event in c.stream(fake.stream_chat, "second", SETTINGS, cancel=cancel):
        if isinstance(event, TokenEvent):
            cancel.set()
    assert c.messages == [user("second"), assistant(FIRST_TOKEN)]


def test_a_stream_closed_early_keeps_what_it_wrote_and_a_reply_that_ended_empty_is_kept():
    fake = FakeService()
    c = Conversation()
    stream = c.stream(fake.stream_chat, "closed", SETTINGS)
    for event in stream:
        if isinstance(event, TokenEvent):
            break
    stream.close()  # a closed tab: no DoneEvent
    assert c.messages == [user("closed"), assistant(FIRST_TOKEN)]
    # a reply that ended by itself with no token (an EOS first) is an answer: kept, empty
    turn = c.begin("quiet", SETTINGS)
    turn.add(DoneEvent(StopReason.EOS, (), (), "", 1.0, 0.0, 3))
    assert c.finish(turn) and c.messages[-2:] == [user("quiet"), assistant("")]


def test_a_turn_that_began_before_clear_is_not_kept():
    c = Conversation()
    turn = c.begin("before", SETTINGS)
    turn.add(DoneEvent(StopReason.EOS, (7,), (), "hi", 1.0, 1.0, 3))
    c.clear()
    assert not c.finish(turn) and c.messages == []


def test_the_seed_rule_counts_replies_asked_and_starts_over_on_clear():
    c = Conversation(seed=5)
    seeds = [c.begin(m, SETTINGS).config.seed for m in ("a", "b", "c")]
    assert seeds == [5, 6, 7]  # reply n gets S + n - 1, kept or not
    assert c.config(SETTINGS).seed == 8 and c.config(SETTINGS).seed == 8  # asking for the config counts nothing
    c.clear()
    assert c.begin("d", SETTINGS).config.seed == 5
    fresh = {Conversation().config(SETTINGS).seed for _ in range(4)}
    assert len(fresh) == 4 and all(0 <= s < 2**63 for s in fresh)  # None: a fresh seed per reply


def test_one_settings_rule():
    config = Conversation(seed=1, trace=True).config(ReplySettings("sibling", 7, True, 0.5, 0.9, 33))
    assert (config.num_speculative_tokens, config.adaptive_gamma, config.temperature, config.top_p,
            config.max_new_tokens, config.seed, config.measure_speedup, config.trace) == (7, True, 0.5, 0.9, 33, 1, True, True)
    assert Conversation().config(SETTINGS).trace is False
    with pytest.raises(ValueError, match="top_p"):
        Conversation().begin("x", ReplySettings("none", 4, False, 0.0, 1.5, 8))


def test_a_fractional_gamma_is_rounded_from_the_page_and_refused_from_an_api_call():
    # the page's γ box took 2.5: rounded half up to 3 (what the label shows), not cut to 2 out of sight
    typed = ReplySettings.from_controls("ngram", 2.5, 0, 1, 99.5, True, None)
    assert (typed.num_speculative_tokens, typed.max_new_tokens, typed.system_prompt) == (3, 100, "")
    assert typed.gamma_label("ngram") == "γ adaptive ≤ 3"
    assert Conversation().config(typed).num_speculative_tokens == 3
    assert ReplySettings.from_controls("ngram", 2.4, 0, 1, 64, False, "be brief").num_speculative_tokens == 2
    for bad, name in ((ReplySettings("ngram", 2.5, True, 0.0, 1.0, 8), "num_speculative_tokens"),
                      (ReplySettings("ngram", 2, True, 0.0, 1.0, 8.5), "max_new_tokens")):
        with pytest.raises(ValueError, match=f"{name}.*whole number, got"):
            Conversation().begin("x", bad)
    assert Conversation().config(ReplySettings("ngram", 4.0, True, 0.0, 1.0, 8.0)).num_speculative_tokens == 4


def test_restore_takes_the_turns_and_the_seed_rule_goes_on_after_them():
    c = Conversation(seed=10)
    c.restore([user("a"), assistant("b")], "Be kind.")
    assert c.history() == [{"role": "system", "content": "Be kind."}, user("a"), assistant("b")]
    assert c.config(SETTINGS).seed == 11


def test_the_page_and_the_terminal_send_the_same_history_for_the_same_turns():
    """One rule: after the same two messages, the page's session and the terminal chat call the
    service with the same history (the page's drafter and settings as the terminal's)."""
    from specchat.commands.repl import ReplState
    from specchat.ui.session.chat import ChatSession

    page_fake, term_fake = FakeService(), FakeService()
    session = ChatSession(page_fake, text_interval_s=0.0)
    state = ReplState(drafter="ngram", num_speculative_tokens=4, adaptive_gamma=False, max_new_tokens=64)
    for message in ("one", "two", "three"):
        list(session.respond(message, SETTINGS))
        list(state.conversation.stream(term_fake.stream_chat, message, state.settings()))
    assert [c["history"] for c in page_fake.calls] == [c["history"] for c in term_fake.calls]
    assert page_fake.calls[2]["history"] == [user("one"), assistant(REPLY_TEXT), user("two"), assistant(REPLY_TEXT)]
    assert session.history == state.history
