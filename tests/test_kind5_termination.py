"""Kind 5, termination inside a multi-token commit.

EOS, stop strings and max_new_tokens are found at the earliest committed token; no token past
the stop is returned or streamed; the streamed text equals the returned text; a drafted EOS
the target rejects does not end the reply; drafts never exceed the remaining budget.
"""

from __future__ import annotations

import threading

import pytest
from lossless import (
    EOS_BYTE,
    TINY_PROMPT,
    TINY_VOCAB,
    TOK,
    ContractDrafter,
    FakeLM,
    ScriptDrafter,
    V,
    events_of,
    hashed_logits,
    script_logits,
    stream_text,
)
from tiny_models import byte_tokenizer

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import StopReason, TokenEvent
from specchat.drafters import ModelDrafter
from specchat.runtimes.transformers import TransformersRuntime


def test_stop_inside_multi_token_commit(engine, target, reference):
    drafter = ModelDrafter(TransformersRuntime(target), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="self")
    # budget: 5 tokens although a round could commit 9
    done = events_of(engine, TINY_PROMPT, drafter, num_speculative_tokens=8, max_new_tokens=5)[-1]
    assert list(done.token_ids) == reference[:5] and done.stop_reason is StopReason.MAX_NEW_TOKENS
    # EOS at the 3rd reference token (first occurrence): the reply ends there
    eos = reference[2]
    first = reference.index(eos)
    eos_engine = SpeculativeEngine(TransformersRuntime(target), byte_tokenizer(), eos_token_ids=[eos])
    events = events_of(eos_engine, TINY_PROMPT, drafter, num_speculative_tokens=8, max_new_tokens=40)
    assert list(events[-1].token_ids) == reference[: first + 1]
    assert events[-1].stop_reason is StopReason.EOS
    assert sum(isinstance(e, TokenEvent) for e in events) == first + 1


def test_stop_string_cuts_text_and_stream(engine, target, reference):
    tok = byte_tokenizer()
    full = tok.decode(reference, skip_special_tokens=True)
    stop = full[6:8]
    cut = full.index(stop)
    drafter = ModelDrafter(TransformersRuntime(target), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=TINY_VOCAB, name="self")
    events = events_of(engine, TINY_PROMPT, drafter, num_speculative_tokens=8, max_new_tokens=40, stop_strings=(stop,))
    done = events[-1]
    assert done.stop_reason is StopReason.STOP_STRING
    assert done.text == full[:cut]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == full[:cut]
    assert list(done.token_ids) == reference[: len(done.token_ids)]


def scripted_engine(reply: bytes, prompt: bytes, *, eos=(EOS_BYTE,), after=EOS_BYTE, context_length=None):
    script = list(reply)
    fn = script_logits(257, script, len(prompt), after)
    target = FakeLM(257, fn, max_positions=context_length or 4096)
    return SpeculativeEngine(TransformersRuntime(target), TOK, eos_token_ids=eos, context_length=context_length), target, script


REPLY = "Hello, wörld! <END> tail € END 🙂 more text".encode()


PROMPT = b"prompt with <END> and END inside: "


@pytest.mark.parametrize(
    "stops, expected",
    [
        (("<END>",), "Hello, wörld! "),
        (("ld! <",), "Hello, wör"),  # spans many tokens
        (("<EN", "<END>"), "Hello, wörld! "),  # one stop a prefix of another
        (("<END>", "<EN"), "Hello, wörld! "),
        (("ö",), "Hello, w"),  # a 2-byte character split across two tokens
        (("€",), "Hello, wörld! <END> tail "),  # 3 bytes
        (("🙂",), "Hello, wörld! <END> tail € END "),  # 4 bytes
        (("wörld! <END> tail € END 🙂 more textX",), "Hello, wörld! <END> tail € END 🙂 more text"),
        (("xyz", "! <"), "Hello, wörld"),
        (("llo, wörld! <END> tail € X", "o, w"), "Hell"),  # a later-starting stop completes first
        (("H",), ""),  # stop at the very first token
        (("e text",), "Hello, wörld! <END> tail € END 🙂 mor"),  # completed by the last budgeted token
    ],
)
@pytest.mark.parametrize("gamma", [1, 4, 9])
def test_stop_strings_inside_commits(stops, expected, gamma):
    engine, target, script = scripted_engine(REPLY, PROMPT)
    # a drafter that is right except at every 5th position: multi-token commits with rejections
    wrong = [t if i % 5 != 4 else (t + 1) % 256 for i, t in enumerate(script)]
    drafter = ScriptDrafter(wrong, len(PROMPT))
    events = events_of(
        engine, list(PROMPT), drafter, num_speculative_tokens=gamma, max_new_tokens=len(script), stop_strings=stops
    )
    done = events[-1]
    assert done.text == expected
    assert stream_text(events) == expected
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert [e.token_id for e in tokens] == list(done.token_ids) == script[: len(done.token_ids)]
    if done.stop_reason is StopReason.STOP_STRING:
        # the reply ends with the token that completed the first stop string, nothing later
        full = TOK.decode(done.token_ids)
        shorter = TOK.decode(done.token_ids[:-1])
        assert any(s in full for s in stops) and not any(s in shorter for s in stops)
    else:
        assert done.stop_reason is StopReason.MAX_NEW_TOKENS and done.text == REPLY.decode()


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_eos_inside_commit_ends_reply_and_drafted_eos_is_not_a_stop(gamma):
    reply = b"abc def ghi"
    script = list(reply) + [EOS_BYTE] + list(b"after eos")
    fn = script_logits(257, script, len(PROMPT), EOS_BYTE)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(257, fn)), TOK, eos_token_ids=[EOS_BYTE])
    # the drafter drafts past EOS correctly: the reply must end at EOS
    events = events_of(
        engine, list(PROMPT), ScriptDrafter(script, len(PROMPT)), num_speculative_tokens=gamma, max_new_tokens=40
    )
    done = events[-1]
    assert done.stop_reason is StopReason.EOS
    assert list(done.token_ids) == list(reply) + [EOS_BYTE]
    assert done.text == stream_text(events) == "abc def ghi"
    # a drafter that drafts EOS where the target says otherwise: rejected, the reply goes on
    bad = [EOS_BYTE if i in (2, 5) else t for i, t in enumerate(script)]
    events = events_of(
        engine, list(PROMPT), ScriptDrafter(bad, len(PROMPT)), num_speculative_tokens=gamma, max_new_tokens=40
    )
    assert list(events[-1].token_ids) == list(reply) + [EOS_BYTE]
    assert events[-1].stop_reason is StopReason.EOS


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 9, 10, 11])
@pytest.mark.parametrize("gamma", [1, 4, 9])
def test_budget_never_exceeded_and_drafts_fit_the_budget(budget, gamma):
    engine, target, script = scripted_engine(REPLY, PROMPT)
    drafter = ScriptDrafter(script, len(PROMPT))
    events = events_of(engine, list(PROMPT), drafter, num_speculative_tokens=gamma, max_new_tokens=budget)
    done = events[-1]
    assert list(done.token_ids) == script[:budget]
    assert done.stop_reason is StopReason.MAX_NEW_TOKENS
    assert done.text == stream_text(events) == TOK.decode(script[:budget])  # incomplete char flushed as U+FFFD
    for produced, asked in drafter.requests:
        assert 1 <= asked <= min(gamma, budget - produced - 1)


def test_cancel_keeps_text_held_for_a_possible_stop_string():
    """Cancelled reply: no stop string was found, so the text is everything committed.

    The reply is "abcab..." and the stop string "abX" never completes; after "ab" the
    detokenizer holds "ab" back (it could be the start of "abX"). Cancelling then must not
    silently drop those committed characters from the final text.
    """
    engine, target, script = scripted_engine(b"abcabcabcab", b"> ")
    cancel = threading.Event()
    events = []
    for e in engine.generate(list(b"> "), None, GenerationConfig(max_new_tokens=20, stop_strings=("abX",)), cancel):
        events.append(e)
        if isinstance(e, TokenEvent) and len([x for x in events if isinstance(x, TokenEvent)]) == 5:
            cancel.set()
    done = events[-1]
    assert done.stop_reason is StopReason.CANCELLED
    assert list(done.token_ids) == list(b"abcab")
    assert done.text == stream_text(events)
    assert done.text == "abcab"


def test_stop_string_in_prompt_does_not_stop_and_empty_stops_ignored():
    engine, target, script = scripted_engine(b"plain reply", b"STOP here STOP")
    events = events_of(engine, list(b"STOP here STOP"), None, max_new_tokens=11, stop_strings=("STOP", ""))
    assert events[-1].text == "plain reply" and events[-1].stop_reason is StopReason.MAX_NEW_TOKENS


def test_cancel_mid_character_keeps_every_committed_byte():
    """Cancelled after 3 tokens of "ab€cd", inside the 3-byte €: the reply text is the
    committed bytes decoded (a replacement character for the cut one), streamed and returned alike."""
    reply, prompt = "ab€cd".encode(), b"> "
    engine = SpeculativeEngine(
        TransformersRuntime(FakeLM(257, script_logits(257, list(reply), len(prompt), EOS_BYTE))), TOK, eos_token_ids=[EOS_BYTE]
    )
    cancel = threading.Event()
    events = []
    for e in engine.generate(list(prompt), None, GenerationConfig(max_new_tokens=20), cancel):
        events.append(e)
        if sum(isinstance(x, TokenEvent) for x in events) == 3:
            cancel.set()
    done = events[-1]
    assert done.stop_reason is StopReason.CANCELLED and len(done.token_ids) == 3
    assert done.text == stream_text(events) == TOK.decode(list(done.token_ids)) == "ab\ufffd"


def test_eos_as_the_last_budgeted_token_is_reported_as_eos():
    reply, prompt = b"abc", b"> "
    engine = SpeculativeEngine(
        TransformersRuntime(FakeLM(257, script_logits(257, [*reply, EOS_BYTE], len(prompt), EOS_BYTE))), TOK, eos_token_ids=[EOS_BYTE]
    )
    done = events_of(engine, list(prompt), None, max_new_tokens=4)[-1]
    assert list(done.token_ids) == [*reply, EOS_BYTE] and done.stop_reason is StopReason.EOS


def test_a_drafter_proposing_more_than_asked_is_refused():
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=1, scale=2.0))), None)
    with pytest.raises(RuntimeError, match="at most 3 were asked for"):
        events_of(engine, [1, 2], ContractDrafter(lambda n: [0] * (n + 1)), num_speculative_tokens=3, max_new_tokens=10)
