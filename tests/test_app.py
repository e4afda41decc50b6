"""The Gradio app driven end to end with a scripted fake ChatService: no model, no network.

The fake yields a fixed event stream with every token kind (accepted, resampled, bonus and a
target-only round), HTML in the model output, a notice, and optional delays and failures.
The app is launched on 127.0.0.1 and driven with gradio_client, like a browser would.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gradio as gr
from gradio_client import Client

import app
from specchat.config import GenerationConfig
from specchat.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.service import DRAFTER_KINDS, Notice

A, R, B = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS

# (num_drafted, num_accepted, [(text, kind), ...]) per round; γ = 4.
SCRIPT = [
    (0, 0, [("Sure", B)]),  # target only
    (4, 2, [("!", A), (" Here", A), (" is", R)]),
    (4, 4, [(" code", A), (":\n", A), ("```", A), ("python\n", A), ("def", B)]),
    (4, 1, [(" f(x):\n", A), ("    return", R)]),
    (4, 3, [(" x * 2\n", A), ("```\n", A), ("<script>alert(1)</script>", A), (" *done* & <b>ok</b>", R)]),
    (4, 0, [("\n    ", R)]),  # Gradio's cleandoc would strip this indentation from raw HTML lines
    (4, 1, [("\tindented", A), ("\n", R)]),
]
REPLY_TEXT = "".join(text for _, _, tokens in SCRIPT for text, _ in tokens)


class FakeService:
    """Implements the ChatService interface with a scripted stream.

    Messages containing "boom" fail after the first round; "notice" adds a Notice first;
    ``delay_s`` sleeps before each round (for streaming and Stop tests).
    """

    target_name = "fake-target"
    context_length = 4096

    def __init__(self, *, delay_s: float = 0.0, baseline_tokens_per_s: float | None = 10.0, rounds: int = 1):
        self.delay_s = delay_s
        self.baseline_tokens_per_s = baseline_tokens_per_s
        self.repeat = rounds
        self.calls: list[dict] = []
        self.prepared: list[str] = []
        self.failing_drafters = {"sibling"}
        self.cancels: list[threading.Event | None] = []

    def load(self) -> None:
        pass

    @property
    def loading(self) -> bool:
        ready = getattr(self, "ready", None)
        return ready is not None and not ready.is_set()

    def start(self, drafter: str) -> threading.Thread:
        """Like ChatService.start: prepare the drafter, measure the baseline, in a thread."""
        self.ready = threading.Event()
        self.startup_error = None

        def run():
            try:
                self.prepare_drafter(drafter)
                self.measure_baseline()
            except Exception as exc:
                self.startup_error = exc
            finally:
                self.ready.set()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def drafter_kinds(self) -> list[str]:
        return list(DRAFTER_KINDS)

    def prepare_drafter(self, kind: str) -> None:
        if kind in self.failing_drafters:
            raise ValueError(f"no {kind} drafter is configured for {self.target_name}")
        self.prepared.append(kind)

    def measure_baseline(self, num_tokens: int = 24) -> float:
        self.baseline_tokens_per_s = 10.0
        return self.baseline_tokens_per_s

    def stream_chat(self, history, message, *, drafter, config, cancel=None):
        assert isinstance(config, GenerationConfig)
        self.calls.append(
            {"history": [dict(m) for m in history], "message": message, "drafter": drafter, "config": config}
        )
        self.cancels.append(cancel)
        if "notice" in message:
            yield Notice("older turns were trimmed to fit the context")
        ids, kinds = [], []
        elapsed = 0.0
        round_index = 0
        for _ in range(self.repeat):
            for num_drafted, num_accepted, tokens in SCRIPT:
                if self.delay_s:
                    time.sleep(self.delay_s)
                if cancel is not None and cancel.is_set():
                    yield DoneEvent(StopReason.CANCELLED, tuple(ids), tuple(kinds), "", 5.0, elapsed, 7)
                    return
                for position, (text, kind) in enumerate(tokens):
                    ids.append(len(ids))
                    kinds.append(kind)
                    yield TokenEvent(
                        token_id=ids[-1],
                        kind=kind,
                        text=text,
                        target_prob=0.9,
                        draft_prob=0.8 if kind is A else None,
                        rejected_token_id=99 if kind is R else None,
                        rejected_target_prob=0.1 if kind is R else None,
                        rejected_draft_prob=0.7 if kind is R else None,
                        round_index=round_index,
                        position=position,
                        num_drafted=num_drafted,
                    )
                elapsed += 100.0 + 10.0 * num_drafted
                yield RoundEvent(
                    round_index=round_index,
                    num_speculative_tokens=config.num_speculative_tokens,
                    num_drafted=num_drafted,
                    num_accepted=num_accepted,
                    num_committed=len(tokens),
                    accepted_mask=tuple([True] * num_accepted + ([False] if num_accepted < num_drafted else [])),
                    draft_ms=10.0 * num_drafted,
                    draft_steps=num_drafted if drafter != "ngram" else 0,
                    verify_ms=100.0,
                    elapsed_ms=elapsed,
                )
                round_index += 1
                if "boom" in message:
                    raise ValueError("the engine failed on purpose")
        yield DoneEvent(StopReason.EOS, tuple(ids), tuple(kinds), REPLY_TEXT * self.repeat, 5.0, elapsed, 7)


# ---- fixtures ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served():
    """(client, fake, demo): the app on 127.0.0.1 with a fake service, closed afterwards."""
    fake = FakeService()
    demo = app.build_ui(fake)
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(
        server_name="127.0.0.1",
        prevent_thread_lock=True,
        quiet=True,
        ssr_mode=False,
        share=False,
        css=app.CSS,
    )
    try:
        client = Client(url, verbose=False, download_files=False, analytics_enabled=False)
        yield client, fake, demo
    finally:
        demo.close()


def _chat(client: Client, message: str, *, drafter: str = "int4", gamma: int = 4):
    """The final (textbox, chat, stats, 4 plots); the textbox is the last value /chat set, or
    None if it never touched it (the page empties the box itself when sending: take_message)."""
    job = client.submit(message, drafter, gamma, 0.0, 1.0, 256, True, api_name="/chat")
    final = list(job.result(timeout=30))
    set_values = [out[0] for out in job.outputs() if not isinstance(out[0], dict)]  # dict: gr.skip()
    final[0] = set_values[-1] if set_values else None
    return final


def _text(content) -> str:
    """gradio_client returns message content as [{"type": "text", "text": ...}]."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def _new_session(client: Client) -> Client:
    return Client(client.src, verbose=False, download_files=False, analytics_enabled=False)


def _respond_fn(demo: gr.Blocks):
    for fn in demo.fns.values():
        if fn.api_name == "chat":
            return fn.fn
    raise AssertionError("no /chat endpoint")


# ---- tests ---------------------------------------------------------------------------------
def test_build_ui_returns_blocks_without_loading_anything():
    fake = FakeService()
    demo = app.build_ui(fake)
    assert isinstance(demo, gr.Blocks)
    assert fake.calls == [] and fake.prepared == []


def test_token_span_escapes_text_and_title():
    from specchat.ui_render import token_span

    event = TokenEvent(1, A, '<img src=x onerror="alert(1)">', 0.5, 0.25, None, None, None, 0, 0, 4)
    span = token_span(event)
    assert span == (
        '<span class="tok tok-accepted" title="accepted · p=0.50 q=0.25">&lt;img src=x onerror="alert(1)"&gt;</span>'
    )
    assert token_span(TokenEvent(2, B, "", 0.5, None, None, None, None, 0, 0, 4)) == ""
    target_only = token_span(TokenEvent(3, B, "a\n\tb", 1.0, None, None, None, None, 0, 0, 0))
    assert 'class="tok tok-target"' in target_only and ">a&#10;&#9;b<" in target_only


def test_chatbot_keeps_indentation_and_tabs():
    """Gradio's Chatbot runs inspect.cleandoc on string content; escape_text makes it a no-op."""
    from specchat.ui_render import ReplyRenderer

    reply = ReplyRenderer()
    for i, text in enumerate(["def f():", "\n   ", " return 1", "\n\tx", "\n\n"]):
        reply.add_token(TokenEvent(i, A, text, 0.9, 0.9, None, None, None, 0, i, 4))
    message = gr.Chatbot().postprocess([{"role": "assistant", "content": reply.html()}]).root[0]
    shown = message.content[0].text if isinstance(message.content, list) else message.content.text
    assert html.unescape(re.sub(r"<[^>]*>", "", shown)) == "def f():\n    return 1\n\tx\n\n"


def test_drafter_choices_match_service():
    assert tuple(app.DRAFTER_CHOICES) == tuple(DRAFTER_KINDS)


def test_streamed_reply_is_colored_and_escaped(served):
    client, fake, _ = served
    textbox, chat, stats, *plots = _chat(_new_session(client), "hello <b>there</b>")
    assert textbox is None  # a reply never writes into the box (the user may be typing the next message)
    assert [m["role"] for m in chat] == ["user", "assistant"]
    user, reply = _text(chat[0]["content"]), _text(chat[1]["content"])
    assert "hello &lt;b&gt;there&lt;/b&gt;" in user
    for cls in ("tok-accepted", "tok-resampled", "tok-bonus", "tok-target"):
        assert f'class="tok {cls}"' in reply, cls
    assert "<script>" not in reply and "&lt;script&gt;alert(1)&lt;/script&gt;" in reply
    assert "<b>" not in reply
    assert "*done* &amp; &lt;b&gt;ok&lt;/b&gt;" in reply  # markdown characters kept literally
    assert "```" in reply and ":&#10;" in reply and "\n" not in reply  # newlines as references
    assert 'title="resampled · p=0.90 (rejected draft: p=0.10 q=0.70)"' in reply
    assert 'title="accepted · p=0.90 q=0.80"' in reply
    # the text inside the spans is exactly the model's text
    assert html.unescape(re.sub(r"<[^>]*>", "", reply)) == REPLY_TEXT
    # stats: α = 11 accepted / 16 judged drafts (3+4+2+4+1+2), 18 tokens in 7 rounds, baseline 10 tok/s
    assert "α</b> 0.69" in stats
    assert "baseline</b> 10.0 tok/s" in stats
    assert "18 tokens in 7 rounds" in stats
    assert "1 target only" in stats
    assert "predicted S(4)" in stats
    assert len(plots) == 4 and all(p is not None for p in plots)
    assert fake.calls[-1]["drafter"] == "int4"
    assert fake.calls[-1]["config"].num_speculative_tokens == 4


def test_history_holds_plain_text_not_html(served):
    client, fake, _ = served
    session = _new_session(client)
    _chat(session, "first")
    _chat(session, "second")
    assert fake.calls[-1]["message"] == "second"
    assert fake.calls[-1]["history"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": REPLY_TEXT},
    ]


def test_error_is_shown_and_message_is_kept(served):
    client, fake, _ = served
    session = _new_session(client)
    textbox, chat, stats, *_ = _chat(session, "boom please")
    assert textbox == "boom please"  # put back for a retry
    reply = _text(chat[-1]["content"])
    assert 'class="spec-error"' in reply and "the engine failed on purpose" in reply
    assert "boom please" in _text(chat[0]["content"])  # the user's message stays visible
    _chat(session, "after")
    assert fake.calls[-1]["history"] == []  # the failed exchange is not sent to the model


def test_notice_is_shown_in_the_reply(served):
    client, _, _ = served
    _, chat, _, *_ = _chat(_new_session(client), "notice me")
    reply = _text(chat[-1]["content"])
    assert 'class="spec-notice"' in reply and "older turns were trimmed" in reply


def test_invalid_setting_keeps_message():
    """The sliders bound γ in the browser; a value the engine rejects still reaches the user
    as an error naming the range, and nothing is yielded, so the textbox keeps the message."""
    fake = FakeService()
    respond = _respond_fn(app.build_ui(fake))
    updates = []
    with pytest.raises(gr.Error, match=r"num_speculative_tokens must be an integer in 1\.\.16, got 0"):
        for update in respond("hi", [], [], "int4", 0, 0.0, 1.0, 256):  # γ must be >= 1
            updates.append(update)
    assert updates == [] and fake.calls == []


def test_progress_bars_started_before_the_ui_keep_working():
    """main() starts loading (tqdm bars) before build_ui. gr.Progress(track_tqdm=True) patches
    tqdm when it is created, and a bar made before the patch then fails on update ("no
    attribute '_progress'"): the first start used to die right there."""
    from specchat.progress import tqdm

    with tqdm(total=3, file=open(os.devnull, "w")) as bar:
        demo = app.build_ui(FakeService())
        demo.queue(default_concurrency_limit=1)
        bar.update()


def test_switching_drafter_prepares_it_and_falls_back_on_error(served):
    client, fake, _ = served
    status, value = client.predict("ngram", api_name="/prepare_drafter")
    assert fake.prepared[-1] == "ngram" and "ready" in status
    assert isinstance(value, dict)  # gr.skip(): the dropdown keeps the user's (latest) pick
    status, value = client.predict("sibling", api_name="/prepare_drafter")
    assert "failed" in status and "no sibling drafter" in status
    assert value == "ngram"  # back to the drafter that works


def test_stream_is_throttled_and_ends_with_a_full_update():
    fake = FakeService(delay_s=0.04, rounds=4)  # 28 rounds over ~1.1 s
    demo = app.build_ui(fake)
    demo.queue()
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, ssr_mode=False)
    try:
        client = Client(url, verbose=False, download_files=False, analytics_enabled=False)
        job = client.submit("stream", "int4", 4, 0.0, 1.0, 256, api_name="/chat")
        final = job.result(timeout=30)
        updates = job.outputs()
    finally:
        demo.close()
    assert 3 <= len(updates) < 40  # throttled: far fewer updates than the 72 tokens + 28 rounds
    assert "72 tokens in 28 rounds" in final[2]
    assert REPLY_TEXT.count("Here") * 4 == _text(final[1][-1]["content"]).count("Here")


def test_closing_the_stream_sets_cancel_and_keeps_the_partial_reply():
    """A closed tab: Gradio closes the generator (GeneratorExit) -> the engine's cancel is set."""
    fake = FakeService(delay_s=0.01, rounds=50)
    respond = _respond_fn(app.build_ui(fake))
    gen = respond("go", [], [], "int4", 4, 0.0, 1.0, 256)
    updates = [next(gen) for _ in range(3)]
    cancel = fake.cancels[-1]
    assert isinstance(cancel, threading.Event) and not cancel.is_set()
    gen.close()
    assert cancel.is_set()
    history = updates[-1][3]  # the last yielded history already holds the partial reply
    assert history[0] == {"role": "user", "content": "go"}
    assert history[1]["role"] == "assistant" and history[1]["content"]
    assert (REPLY_TEXT * 50).startswith(history[1]["content"])


class FakeRequest:
    def __init__(self, session_hash):
        self.session_hash = session_hash


def test_stop_button_stops_between_rounds_and_the_reply_says_stopped():
    """Stop sets this session's cancel event; the stream ends normally with a final update."""
    fake = FakeService(delay_s=0.01, rounds=50)
    respond = _respond_fn(app.build_ui(fake))
    mine, other = FakeRequest("session-a"), FakeRequest("session-b")
    gen = respond("go", [], [], "int4", 4, 0.0, 1.0, 256, True, mine)
    updates = [next(gen) for _ in range(3)]
    app.stop_generation(other)  # another tab's Stop does not touch this generation
    assert not fake.cancels[-1].is_set()
    app.stop_generation(mine)
    assert fake.cancels[-1].is_set()
    updates += list(gen)  # runs to its end: no GeneratorExit, no error
    final = updates[-1]
    assert 'class="spec-status">stopped<' in final[1][-1]["content"]
    assert final[2] == final[1]  # the chat state holds what the page shows
    partial = final[3][-1]["content"]
    assert partial and (REPLY_TEXT * 50).startswith(partial) and len(partial) < len(REPLY_TEXT * 50)
    assert "session-a" not in app._ACTIVE


def test_clear_discards_a_running_generation():
    fake = FakeService(delay_s=0.01, rounds=50)
    demo = app.build_ui(fake)
    respond = _respond_fn(demo)
    req = FakeRequest("session-c")
    gen = respond("go", [], [], "int4", 4, 0.0, 1.0, 256, True, req)
    next(gen)
    app.stop_generation(req, discard=True)  # what the Clear button does
    rest = list(gen)
    # it ends on an empty chat: Gradio re-sends a stream's last update when it completes, so
    # stopping without one put the old chat back on the page after Clear had emptied it
    assert len(rest) == 1 and rest[0][1:4] == ([], [], [])


@pytest.mark.parametrize("discard", [False, True])
def test_stop_or_clear_while_the_message_waits_in_the_queue(discard):
    """Sent (take_message), then Stop / Clear before it started: no model work, ends stopped / empty."""
    fake = FakeService(delay_s=0.01, rounds=50)
    demo = app.build_ui(fake)
    respond = _respond_fn(demo)
    take = next(fn.fn for fn in demo.fns.values() if fn.fn.__name__ == "take_message")
    req = FakeRequest(f"session-q{discard}")
    assert take("queued one", req) == ("", "queued one")  # the box empties at once
    app.stop_generation(req, discard=discard)  # pressed while it waits
    updates = list(respond("queued one", [], [], "int4", 4, 0.0, 1.0, 256, True, req))
    if discard:
        assert updates[-1][1:4] == ([], [], []) and fake.calls == []  # never reached the model
    else:
        assert fake.cancels[-1].is_set() and len(fake.calls) == 1  # cancelled before its first round
        assert 'class="spec-status">stopped<' in updates[-1][1][-1]["content"]
        assert updates[-1][3][0] == {"role": "user", "content": "queued one"}  # the message is kept
    # the stop was used up: the next message runs normally
    assert take("next", req) == ("", "next")
    updates = list(respond("next", [], [], "int4", 4, 0.0, 1.0, 256, True, req))
    assert "stopped" not in updates[-1][1][-1]["content"] and updates[-1][3][-1]["content"] == REPLY_TEXT * 50


def test_engine_side_cancel_marks_the_reply_stopped():
    fake = FakeService()
    respond = _respond_fn(app.build_ui(fake))

    def stopped_stream(history, message, *, drafter, config, cancel=None):
        yield from list(FakeService.stream_chat(fake, history, message, drafter=drafter, config=config))[:4]
        yield DoneEvent(StopReason.CANCELLED, (0, 1, 2), (B, A, A), "Sure! Here", 1.0, 1.0, 3)

    fake.stream_chat = stopped_stream
    *_, last = respond("go", [], [], "int4", 4, 0.0, 1.0, 256)
    reply = last[1][-1]["content"]
    assert 'class="spec-status">stopped<' in reply
    assert last[3][-1] == {"role": "assistant", "content": "Sure! Here"}


def test_cli_help_lists_options():
    out = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1"},
    )
    assert out.returncode == 0, out.stderr
    for option in ("--target", "--drafter", "--host", "--port", "--dtype", "ngram", "bfloat16"):
        assert option in out.stdout


def test_is_loopback():
    assert app.is_loopback("127.0.0.1") and app.is_loopback("localhost") and app.is_loopback("::1")
    assert not app.is_loopback("0.0.0.0") and not app.is_loopback("192.168.1.5")


def test_main_warns_for_network_host_and_launches_privately(monkeypatch, capsys):
    fake = FakeService(baseline_tokens_per_s=None)
    launched = {}

    class FakeDemo:
        def queue(self, **kwargs):
            launched["queue"] = kwargs

        def launch(self, **kwargs):
            launched.update(kwargs)

    monkeypatch.setattr(app, "get_service", lambda **kwargs: fake)
    monkeypatch.setattr(
        app, "build_ui", lambda service, default_drafter=None: (launched.update(drafter=default_drafter), FakeDemo())[1]
    )
    assert app.main(["--host", "0.0.0.0", "--drafter", "ngram", "--port", "7999"]) == 0
    fake.ready.wait(5)
    err = capsys.readouterr().err
    assert "WARNING" in err and "reachable from the network" in err
    assert fake.prepared == ["ngram"] and fake.baseline_tokens_per_s == 10.0
    assert launched["server_name"] == "0.0.0.0" and launched["server_port"] == 7999
    assert launched["share"] is False and launched["ssr_mode"] is False and launched["css"] == app.CSS
    assert launched["drafter"] == "ngram"


def test_main_default_drafter_and_no_warning_on_loopback(monkeypatch, capsys):
    fake = FakeService()
    seen = {}

    class FakeDemo:
        def queue(self, **kwargs):
            pass

        def launch(self, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(app, "get_service", lambda **kwargs: fake)
    monkeypatch.setattr(app, "build_ui", lambda service, default_drafter=None: FakeDemo())
    fake.failing_drafters = set()
    assert app.main(["--host", "127.0.0.1"]) == 0
    fake.ready.wait(5)
    assert "WARNING" not in capsys.readouterr().err
    assert fake.prepared == ["sibling-int4"]  # first of DEFAULT_DRAFTER_ORDER that the target offers
    # a drafter that fails to load in the background: the page shows the error, no traceback
    fake.failing_drafters = {"int4"}
    assert app.main(["--drafter", "int4"]) == 0
    fake.ready.wait(5)
    assert "no int4 drafter" in app.loading_html(fake)
    # a drafter the target does not offer is refused at once
    monkeypatch.setattr(fake, "drafter_kinds", lambda: ["none", "ngram"])
    assert app.main(["--drafter", "int4"]) == 2
    assert "available: none, ngram" in capsys.readouterr().err


def test_reply_waits_for_background_loading_and_shows_progress():
    """While the models load, a message shows the loading banner, then streams when ready."""
    from specchat.progress import BOARD

    fake = FakeService()
    fake.ready, fake.startup_error = threading.Event(), None
    BOARD.stage("Loading target fake-target")
    assert "Loading target fake-target" in app.loading_html(fake)
    demo = app.build_ui(fake, default_drafter="ngram")
    respond = next(fn for fn in demo.fns.values() if getattr(fn, "api_name", None) == "chat").fn
    stream = respond("hello", [], [], "ngram", 4, 0.0, 1.0, 64)
    first = next(stream)
    assert "waiting for the models" in str(first[1][-1]["content"]) and isinstance(first[0], dict)  # skip
    fake.ready.set()
    updates = list(stream)
    assert "tok-accepted" in str(updates[-1][1][-1]["content"])
    assert app.loading_html(fake) is None
