"""Incremental detokenization, stop strings and chat prompts."""

import math

import pytest
from tiny_models import byte_tokenizer

from specchat.core.text import StreamingDetokenizer
from specchat.runtimes.chat import build_chat_prompt


def stream(text, stops=(), last=True):
    tok = byte_tokenizer()
    ids = tok.encode(text)
    detok = StreamingDetokenizer(tok, stops)
    deltas = []
    for i, t in enumerate(ids):
        deltas.append(detok.add(t, last=last and i == len(ids) - 1))
        if detok.stopped:
            break
    return deltas, detok


def test_multibyte_characters_are_never_shown_half():
    text = "añ😀é中"
    deltas, detok = stream(text)
    assert "".join(deltas) == text == detok.text
    assert all("\ufffd" not in d for d in deltas)
    # the emoji is 4 bytes: three empty deltas, then the whole character
    assert deltas[3:7] == ["", "", "", "😀"]


def test_stop_string_is_cut_and_prefix_held_back():
    deltas, detok = stream("hello world. bye", stops=("world",))
    assert detok.stopped and detok.text == "hello " and "".join(deltas) == "hello "
    # "w", "o", "r", "l" were held back (could be the stop string), never shown
    assert all("w" not in d for d in deltas)


def test_held_prefix_is_released_when_it_diverges():
    deltas, detok = stream("a wax", stops=("world",))
    assert not detok.stopped and "".join(deltas) == "a wax"
    assert deltas[2] == ""  # "w" held …
    assert deltas[3] == "wa"  # … released with "a"


def test_earliest_of_several_stop_strings():
    _, detok = stream("x = 1\n\ndef f(): pass", stops=("def", "\n\n"))
    assert detok.text == "x = 1"


class TemplateTokenizer:
    """A stand-in with a chat template: one token per character plus 2 per message."""

    chat_template = "fake"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return [0] * sum(len(m["content"]) + 2 for m in messages) + [1]


def test_chat_history_trimmed_oldest_first_current_message_kept():
    tok = TemplateTokenizer()
    history = [
        {"role": "user", "content": "a" * 30},
        {"role": "assistant", "content": "b" * 30},
        {"role": "user", "content": "c" * 10},
        {"role": "assistant", "content": "d" * 10},
    ]
    full = build_chat_prompt(tok, history, "q" * 5, context_length=1000, max_new_tokens=10)
    assert full.num_dropped_messages == 0 and len(full.input_ids) == 32 + 32 + 12 + 12 + 7 + 1
    trimmed = build_chat_prompt(tok, history, "q" * 5, context_length=60, max_new_tokens=10)
    assert trimmed.num_dropped_messages == 2 and len(trimmed.input_ids) == 12 + 12 + 7 + 1
    with pytest.raises(ValueError, match="context window"):
        build_chat_prompt(tok, history, "q" * 100, context_length=60, max_new_tokens=10)


@pytest.mark.parametrize("message", ["", "   \n\t"])
def test_empty_message_is_a_clear_error(message):
    with pytest.raises(ValueError, match="empty"):
        build_chat_prompt(TemplateTokenizer(), [], message, context_length=100, max_new_tokens=10)


class CountingTokenizer:
    """A stand-in chat template: each message costs len(content) + 2 ids, plus 1 for the prompt."""

    chat_template = "counting"

    def __init__(self):
        self.last = None

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.last = messages
        return [0] * sum(len(m["content"]) + 2 for m in messages) + [1]


HISTORY = [
    {"role": "user", "content": "a" * 30},
    {"role": "assistant", "content": "b" * 30},
    {"role": "user", "content": "c" * 10},
    {"role": "assistant", "content": "d" * 10},
]


def test_trimming_drops_whole_exchanges_so_the_history_starts_with_a_user():
    # full prompt 32+32+12+12+7+1 = 96 ids; 96 + 10 > 75, dropping the first exchange gives 32 + 10 ≤ 75
    tok = CountingTokenizer()
    out = build_chat_prompt(tok, HISTORY, "q" * 5, context_length=75, max_new_tokens=10)
    assert out.num_dropped_messages == 2 and tok.last[0]["role"] == "user"


def test_an_exact_fit_drops_nothing():
    out = build_chat_prompt(CountingTokenizer(), HISTORY, "q" * 5, context_length=96 + 10, max_new_tokens=10)
    assert out.num_dropped_messages == 0


class TallyTokenizer(TemplateTokenizer):
    """TemplateTokenizer that counts how many times the chat template was applied."""

    def __init__(self):
        self.calls = 0

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.calls += 1
        return super().apply_chat_template(messages, add_generation_prompt, tokenize)


@pytest.mark.parametrize("num_exchanges", [10, 100, 400])
def test_trimming_a_long_chat_templates_it_a_logarithmic_number_of_times(num_exchanges):
    """Each exchange costs (10 + 2) + (10 + 2) = 24 ids; with a window of 24·5 + 7 + 1 + 10 the
    last 5 exchanges fit with the message "q" * 5 and 10 new tokens, so the rest are dropped.
    Dropping one exchange at a time re-templated the whole chat once per drop (quadratic in its
    length: 400 exchanges took 11-15 s on SmolLM2's tokenizer); a search needs O(log n) calls."""
    tok = TallyTokenizer()
    history = [
        {"role": role, "content": ch * 10}
        for i in range(num_exchanges)
        for role, ch in (("user", "u"), ("assistant", "a"))
    ]
    prompt = build_chat_prompt(tok, history, "q" * 5, context_length=24 * 5 + 8 + 10, max_new_tokens=10)
    assert prompt.num_dropped_messages == 2 * (num_exchanges - 5)
    assert len(prompt.input_ids) == 24 * 5 + 7 + 1
    assert tok.calls <= 2 * math.ceil(math.log2(num_exchanges + 1)) + 2, tok.calls


def test_a_tokenizer_without_a_chat_template_gets_the_messages_as_plain_text():
    """A base model has no chat template: the messages are one plain text, oldest first, joined by
    a blank line (the byte tokenizer's ids are the UTF-8 bytes, so the ids are known by hand), and
    trimming still drops the oldest turns first."""
    tok = byte_tokenizer()
    assert tok.chat_template is None
    prompt = build_chat_prompt(tok, [], "n m l k", context_length=100, max_new_tokens=8)
    assert prompt.input_ids == list(b"n m l k") and prompt.num_dropped_messages == 0
    history = [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "cd"}]
    prompt = build_chat_prompt(tok, history, "ef", context_length=100, max_new_tokens=8)
    assert prompt.input_ids == list(b"ab\n\ncd\n\nef")
    prompt = build_chat_prompt(tok, history, "ef", context_length=len(b"ab\n\ncd\n\nef") + 7, max_new_tokens=8)
    assert prompt.input_ids == list(b"ef") and prompt.num_dropped_messages == 2
    with pytest.raises(ValueError, match="as plain text; the context window holds 4"):
        build_chat_prompt(tok, [], "abcdef", context_length=4, max_new_tokens=1)
