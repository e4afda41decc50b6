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
from types import SimpleNamespace

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gradio as gr
from gradio_client import Client

from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.service import DRAFTER_KINDS, Notice, Pick
from specchat.ui.html.transcript import feed_messages, unwire
from specchat.ui.page import app

A, R, B, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET

# (num_drafted, num_accepted, [(text, kind), ...]) per round; γ = 4.
SCRIPT = [
    (0, 0, [("Sure", T)]),  # target only
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
    # the rest of the service interface (specchat.service_api.ChatServiceProtocol) the page reads
    runtime = "transformers"
    compile = False
    startup_error: BaseException | None = None
    calibration = None
    runtime_choice = None
    compiled = None
    banner = ""

    def __init__(self, *, delay_s: float = 0.0, rounds: int = 1):
        self.delay_s = delay_s
        self.warmed_up: list[str] = []
        self.repeat = rounds
        self.calls: list[dict] = []
        self.prepared: list[str] = []
        self.failing_drafters = {"sibling"}
        self.cancels: list[threading.Event | None] = []
        self.auto_pick = Pick("hybrid", "hybrid = lookup first, then sibling, the fastest model drafter measured here")
        self.picked: Pick | None = None
        self.drafter_errors: dict[str, BaseException] = {}

    def load(self) -> None:
        pass

    @property
    def loading(self) -> bool:
        ready = getattr(self, "ready", None)
        return ready is not None and not ready.is_set()

    def start(self, drafter: str) -> threading.Thread:
        """Like ChatService.start: prepare the drafter and warm up, in a thread."""
        self.ready = threading.Event()
        self.startup_error = None

        def run():
            nonlocal drafter
            try:
                if drafter == "auto":  # ChatService.pick_drafter: by measurement (scripted here)
                    self.picked = self.auto_pick
                    drafter = self.picked.drafter
                self.prepare_drafter(drafter)
                self.warm_up(drafter)
            except Exception as exc:
                self.startup_error = exc
            finally:
                self.ready.set()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def drafter_kinds(self) -> list[str]:
        return list(DRAFTER_KINDS)

    def runtime_description(self, drafter: str | None = None) -> str:
        return ""

    def hybrid_part(self) -> str:
        return "sibling"

    def model_sizes(self, drafter: str):
        return None

    def encode_chat(self, history, message, max_new_tokens):
        raise NotImplementedError("the fake streams chat turns only")

    def generate(self, input_ids, *, drafter, config, cancel=None, prefill_progress=False):
        raise NotImplementedError("the fake streams chat turns only")

    def forget_prefix(self) -> None:
        pass

    def prepare_drafter(self, kind: str) -> None:
        if kind in self.failing_drafters:
            raise ValueError(f"no {kind} drafter is configured for {self.target_name}")
        self.prepared.append(kind)

    def warm_up(self, drafter: str = "none") -> None:
        self.warmed_up.append(drafter)

    def stream_chat(self, history, message, *, drafter, config, cancel=None, prefill_progress=False, continue_from=None):
        assert isinstance(config, GenerationConfig)
        self.calls.append(
            {"history": [dict(m) for m in history], "message": message, "drafter": drafter, "config": config,
             "continue_from": continue_from}
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
                round_ms = 100.0 + 10.0 * num_drafted  # a target step 100 ms, a drafted token 10 ms
                elapsed += round_ms
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
                    round_ms=round_ms,
                    timing=num_drafted == 0,
                )
                round_index += 1
                if "boom" in message:
                    raise ValueError("the engine failed on purpose")
        # (the script is written whole; at max_new_tokens or more it reads as cut there, as a real reply)
        stop = StopReason.MAX_NEW_TOKENS if len(ids) >= config.max_new_tokens else StopReason.EOS
        yield DoneEvent(stop, tuple(ids), tuple(kinds), REPLY_TEXT * self.repeat, 5.0, elapsed, 7)


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


OUTPUTS = ("textbox", "chat", "stats", "table", "plot_alpha", "plot_position", "plot_speed", "plot_theory")


def _chat(client: Client, message: str, *, drafter: str = "int4", gamma: int = 4) -> dict:
    """The final outputs of /chat by name; ``textbox`` is the last value /chat set, or None if
    it never touched it (the page empties the box itself when sending: take_message)."""
    job = client.submit(message, drafter, gamma, 0.0, 1.0, 256, True, api_name="/chat")
    final = dict(zip(OUTPUTS, job.result(timeout=30)))
    set_values = [out[0] for out in job.outputs() if not isinstance(out[0], dict)]  # dict: gr.skip()
    final["textbox"] = set_values[-1] if set_values else None
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


def _by_id(demo: gr.Blocks, elem_id: str):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


# ---- tests ---------------------------------------------------------------------------------
def test_build_ui_returns_blocks_without_loading_anything():
    fake = FakeService()
    demo = app.build_ui(fake)
    assert isinstance(demo, gr.Blocks)
    assert fake.calls == [] and fake.prepared == []


def test_token_span_escapes_text_and_title():
    from specchat.ui.html.render import token_span

    event = TokenEvent(1, A, '<img src=x onerror="alert(1)">', 0.5, 0.25, None, None, None, 0, 0, 4)
    span = token_span(event)
    assert span == (
        '<span class="tok tok-accepted" title="accepted · p=0.50 q=0.25">&lt;img src=x onerror="alert(1)"&gt;</span>'
    )
    assert token_span(TokenEvent(2, B, "", 0.5, None, None, None, None, 0, 0, 4)) == ""
    target_only = token_span(TokenEvent(3, T, "a\n\tb", 1.0, None, None, None, None, 0, 0, 0))
    assert 'class="tok tok-target"' in target_only and ">a&#10;&#9;b<" in target_only


def test_a_reply_keeps_indentation_and_tabs_in_code_and_its_plain_text():
    """A code block keeps the model's indentation and tabs; the reply's plain text (its copy
    button, the history) is exactly what the model wrote."""
    from specchat.ui.html.render import ReplyRenderer

    reply = ReplyRenderer()
    for i, text in enumerate(["```\n", "def f():", "\n   ", " return 1", "\n\tx", "\n```\n"]):
        reply.add_token(TokenEvent(i, A, text, 0.9, 0.9, None, None, None, 0, i, 4))
    code = reply.blocks()[0]
    assert [html.unescape(re.sub(r"<[^>]*>", "", line)) for line in code["lines"]] == ["def f():", "    return 1", "\tx"]
    assert reply.text == "```\ndef f():\n    return 1\n\tx\n```\n"


def test_drafter_choices_come_from_the_one_table():
    from specchat.drafters import kinds as drafter_kinds

    assert tuple(app.DRAFTER_CHOICES) == tuple(DRAFTER_KINDS) == drafter_kinds.KIND_NAMES
    dropdown = next(b for b in app.build_ui(FakeService()).blocks.values() if isinstance(b, gr.Dropdown) and b.label == "drafter")
    assert dropdown.info == drafter_kinds.dropdown_hint() and "sibling-int4 = 4-bit smaller model" in dropdown.info


def test_streamed_reply_is_labeled_colored_escaped_and_summarised(served):
    client, fake, _ = served
    out = _chat(_new_session(client), "hello <b>there</b>")
    assert out["textbox"] is None  # a reply never writes into the box (the user may be typing the next message)
    chat = feed_messages(out["chat"])
    assert [m["role"] for m in chat] == ["user", "assistant"]
    user, reply = chat[0]["content"], chat[1]["content"]
    assert "hello &lt;b&gt;there&lt;/b&gt;" in user
    for cls in ("tok-accepted", "tok-resampled", "tok-bonus", "tok-target"):
        assert f'class="tok {cls}' in reply and "tref-1-" in reply, cls  # tref-R-I: the click target of the inspector
    assert "<script>" not in reply and "&lt;script&gt;alert(1)&lt;/script&gt;" in reply
    assert "<b>" not in reply and "&lt;b&gt;ok&lt;/b&gt;" in reply  # model HTML stays text
    assert "<em>" in reply and "done" in reply  # Markdown rendered: *done* is emphasis
    assert '<div class="spec-code" data-lang="python">' in reply and '<span class="k">' in reply  # highlighted code
    assert 'title="resampled · p=0.90 (rejected draft: p=0.10 q=0.70)"' in reply
    assert 'title="accepted · p=0.90 q=0.80"' in reply
    # the label says what made the reply; the summary closes it
    assert '<div class="spec-label">#1 · int4 · γ adaptive ≤ 4 · T 0 (greedy) · top-p 1</div>' in reply
    # the fake's rounds: 100 ms per target step + 10 ms per drafted token; one target-only round
    # (t₁ = 100 ms): 18 × 100 / 940 = 1.91× would rest on one timed step, so it is held back
    assert "18 tokens · α 0.69 · 2.57 tokens/round · speedup held back (timing: 1 target step of the 3 needed)" in reply
    # the finished reply carries the model's text exactly (its copy button, the history)
    assert unwire(out["chat"])["items"][-1]["reply"]["text"] == REPLY_TEXT
    # stats: α = 11 accepted / 16 judged drafts (3+4+2+4+1+2), 18 tokens in 7 rounds
    stats = out["stats"]
    assert "#1 · int4 · γ adaptive ≤ 4" in stats and "α</b> 0.69" in stats
    assert "speedup</b> –" in stats and "measured timing: 1 target step of the 3 needed" in stats
    assert "18 tokens in 7 rounds" in stats and "1 target only" in stats and "baseline" not in stats
    assert ">1 bonus<" in stats and ">11 accepted<" in stats and ">5 resampled<" in stats  # counted by hand from SCRIPT
    assert "<td>1</td><td>int4</td>" in out["table"] and "<td>1.91×</td>" not in out["table"]
    assert fake.calls[-1]["drafter"] == "int4"
    config = fake.calls[-1]["config"]
    assert config.num_speculative_tokens == 4 and config.measure_speedup


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
    out = _chat(session, "boom please")
    assert out["textbox"] == "boom please"  # put back for a retry
    chat = feed_messages(out["chat"])
    reply = chat[-1]["content"]
    assert 'class="spec-error"' in reply and "the engine failed on purpose" in reply
    assert "boom please" in chat[0]["content"]  # the user's message stays visible
    _chat(session, "after")
    assert fake.calls[-1]["history"] == []  # the failed exchange is not sent to the model


def test_notice_is_shown_in_the_reply(served):
    client, _, _ = served
    out = _chat(_new_session(client), "notice me")
    reply = feed_messages(out["chat"])[-1]["content"]
    assert 'class="spec-notice"' in reply and "older turns were trimmed" in reply


def test_charts_switch_between_this_reply_and_the_whole_conversation(served):
    client, _, _ = served
    session = _new_session(client)
    _chat(session, "one", drafter="ngram")
    _chat(session, "two", drafter="int4")
    figures = session.predict("whole conversation", api_name="/charts")
    speedup = figures[2]["plot"] if isinstance(figures[2], dict) and "plot" in figures[2] else figures[2]
    assert "Speedup by reply" in str(speedup) and "#1 ngram" in str(speedup) and "#2 int4" in str(speedup)
    figures = session.predict("this reply", api_name="/charts")
    assert "Speedup by reply" not in str(figures[2]) and "Speed: " in str(figures[2])


def test_invalid_setting_is_refused_before_any_model_work():
    """The sliders bound γ in the browser; a value the engine rejects still reaches the user
    as an error naming the range, before anything changes on the page."""
    fake = FakeService()
    respond = _respond_fn(app.build_ui(fake))
    updates = []
    with pytest.raises(gr.Error, match=r"num_speculative_tokens must be an integer in 1\.\.16, got 0"):
        for update in respond("hi", "int4", 0, 0.0, 1.0, 256):  # γ must be >= 1
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
    assert isinstance(value, dict) or value in (None, "int4", "sibling-int4")  # skipped: the user's pick stays
    status, value = client.predict("sibling", api_name="/prepare_drafter")
    assert "failed" in status and "no sibling drafter" in status
    assert value == "ngram"  # back to the drafter that works


class FakeRequest:
    def __init__(self, session_hash):
        self.session_hash = session_hash


def test_respond_yields_updates_keyed_by_component_and_stop_reaches_the_session():
    """The handler turns the session's Views into {component: value}; Stop from the same
    browser session stops it, another session's Stop does not."""
    fake = FakeService(delay_s=0.01, rounds=50)
    demo = app.build_ui(fake)
    respond = _respond_fn(demo)
    stop = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "stop_generation")
    mine, other = FakeRequest("session-a"), FakeRequest("session-b")
    gen = respond("go", "int4", 4, 0.0, 1.0, 256, True, request=mine)
    first = next(gen)
    chatbot, stats = _by_id(demo, "spec-chat"), _by_id(demo, "spec-stats")
    assert isinstance(first, dict) and chatbot in first and all(isinstance(k, gr.components.Component) for k in first)
    next(gen)  # the stream has started
    stop(other)
    assert not fake.cancels[-1].is_set()
    stop(mine)
    assert fake.cancels[-1].is_set()
    last = list(gen)[-1]
    assert 'class="spec-status">stopped<' in feed_messages(last[chatbot])[-1]["content"] and "#1 · int4" in last[stats]
    assert "session-a" in demo.sessions and not demo.sessions.get("session-a").busy


def test_unload_drops_the_session_and_stops_its_reply():
    fake = FakeService(delay_s=0.01, rounds=50)
    demo = app.build_ui(fake)
    respond = _respond_fn(demo)
    gen = respond("go", "int4", 4, 0.0, 1.0, 256, True, request=FakeRequest("tab"))
    next(gen), next(gen)
    unload = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "drop_session")
    unload(FakeRequest("tab"))
    assert "tab" not in demo.sessions and fake.cancels[-1].is_set()
    gen.close()


@pytest.mark.subprocess
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
    fake = FakeService()
    launched = {}

    class FakeDemo:
        def queue(self, **kwargs):
            launched["queue"] = kwargs

        def launch(self, **kwargs):
            launched.update(kwargs)

    monkeypatch.setattr(app, "get_service", lambda **kwargs: fake)
    monkeypatch.setattr(app, "port_in_use", lambda host, port: None)  # whatever else runs on this machine
    monkeypatch.setattr(
        app, "build_ui", lambda service, default_drafter=None: (launched.update(drafter=default_drafter), FakeDemo())[1]
    )
    assert app.main(["--host", "0.0.0.0", "--drafter", "ngram", "--port", "7999"]) == 0
    fake.ready.wait(5)
    err = capsys.readouterr().err
    assert "WARNING" in err and "reachable from the network" in err
    assert fake.prepared == ["ngram"] and fake.warmed_up == ["ngram"]
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
    monkeypatch.setattr(app, "build_ui", lambda service, default_drafter=None: (seen.update(drafter=default_drafter), FakeDemo())[1])
    monkeypatch.setattr(app, "port_in_use", lambda host, port: None)
    fake.failing_drafters = set()
    assert app.main(["--host", "127.0.0.1"]) == 0
    fake.ready.wait(5)
    time.sleep(0.2)  # the "Ready" line is printed by a thread once ready is set
    err = capsys.readouterr().err
    assert "WARNING" not in err
    # no --drafter: the service picks by measurement while loading, and the terminal says why
    assert seen["drafter"] == "auto" and fake.prepared == ["hybrid"]
    assert "picked by measurement on this machine" in err
    assert "with drafter 'hybrid' (hybrid = lookup first, then sibling, the fastest model drafter measured here)" in err
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
    chatbot, textbox = _by_id(demo, "spec-chat"), _by_id(demo, "spec-input")
    stream = _respond_fn(demo)("hello", "ngram", 4, 0.0, 1.0, 64)
    first = next(stream)
    assert "waiting for the models" in feed_messages(first[chatbot])[-1]["content"] and textbox not in first
    fake.ready.set()
    updates = list(stream)
    assert "tok-accepted" in feed_messages(next(u[chatbot] for u in reversed(updates) if chatbot in u))[-1]["content"]
    assert app.loading_html(fake) is None


def test_a_taken_port_is_a_one_line_error_before_any_loading(monkeypatch, capsys):
    """A port already in use is refused at once, naming --port (Gradio's own error came as a
    traceback after the models had started loading, and named an environment variable)."""
    import socket

    monkeypatch.setattr(app, "get_service", lambda **kwargs: pytest.fail("the models must not start loading"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert app.port_in_use("127.0.0.1", port) is not None
        assert app.main(["--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err and "Traceback" not in err
    assert app.port_in_use("127.0.0.1", port) is None  # free again once closed


def test_ready_line_repeats_the_address_and_threads_are_set(monkeypatch, capsys):
    """The progress bars overwrite Gradio's "Running on" line: "Ready" repeats the address."""
    import torch

    fake = FakeService()

    class FakeDemo:
        def queue(self, **kwargs):
            pass

        def launch(self, **kwargs):
            pass

    monkeypatch.setattr(app, "get_service", lambda **kwargs: fake)
    monkeypatch.setattr(app, "build_ui", lambda service, default_drafter=None: FakeDemo())
    monkeypatch.setattr(app, "port_in_use", lambda host, port: None)
    before = torch.get_num_threads()
    try:
        assert app.main(["--drafter", "ngram", "--port", "7998", "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    fake.ready.wait(5)
    deadline = time.monotonic() + 5
    err = ""
    while "Ready" not in err and time.monotonic() < deadline:
        time.sleep(0.05)
        err += capsys.readouterr().err
    assert "Ready: " in err and "Open http://127.0.0.1:7998" in err
    with pytest.raises(SystemExit):
        app.parse_args(["--threads", "0"])


def test_app_trace_option_refuses_a_file_that_is_not_a_trace(tmp_path, capsys):
    bad = tmp_path / "notes.jsonl"
    bad.write_text("hello\n", encoding="utf-8")
    assert app.main(["--trace", str(bad), "--port", "7998"]) == 2
    err = capsys.readouterr().err
    assert "cannot open the trace" in err and "not JSON" in err
    assert app.main(["--trace", str(tmp_path / "missing.jsonl"), "--port", "7998"]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_the_page_shows_the_drafter_picked_by_measurement_and_why():
    """build_ui(default_drafter="auto"): once the service is ready, the page's menu switches to the
    drafter the service picked, and the status line says why (the measured speedups)."""
    fake = FakeService()
    fake.failing_drafters = set()
    fake.start("auto")
    fake.ready.wait(5)
    demo = app.build_ui(fake, default_drafter="auto")
    show = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "show_loading")
    shown = list(show())[-1]  # loaded: the banner, and the model's name in the header and the model menu
    assert shown[_by_id(demo, "spec-loading")] == getattr(fake, "banner", "")
    texts = [v for v in shown.values() if isinstance(v, str)]
    assert any(f"(`{fake.target_name}`)" in t for t in texts)
    assert [v.value for v in shown.values() if isinstance(v, gr.Dropdown)] == [fake.target_name]
    apply = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "apply_startup_pick")
    first = next(b.value for b in demo.blocks.values() if isinstance(b, gr.Dropdown) and b.label == "drafter")
    last = apply(first, None, SimpleNamespace(session_hash="tab-0"))  # the menu still shows its first value
    status = html.unescape(last[_by_id(demo, "spec-drafter-status")])
    assert "drafter 'hybrid' ready · picked by measurement: hybrid = lookup first, then sibling" in status
    menu = next(v for v in last.values() if isinstance(v, gr.Dropdown))  # the menu: its value and labels
    assert menu.value == "hybrid" and sum(v == "hybrid" for v in last.values()) == 1  # and the active drafter
    assert ("hybrid", "hybrid") in [tuple(c) for c in menu.choices]  # no calibration here: the plain names
    # a drafter asked for by name: no pick, no reason
    named = app.build_ui(fake, default_drafter="ngram")
    apply_named = next(fn.fn for fn in named.fns.values() if fn.fn is not None and fn.fn.__name__ == "apply_startup_pick")
    last = apply_named("ngram", None, SimpleNamespace(session_hash="tab-0"))
    assert "picked by measurement" not in last[_by_id(named, "spec-drafter-status")]
    assert "hybrid" not in last.values()
    # a drafter the user picked on this page before the load ended stays picked: the start-up
    # pick writes neither the menu nor the status line (that pick's own status follows), whether
    # the menu's value when loading ends shows it or the pick was of the menu's first value
    status = _by_id(demo, "spec-drafter-status")
    assert apply("none" if first != "none" else "ngram", None, SimpleNamespace(session_hash="tab-1")) == {status: gr.skip()}
    note = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "note_pick")
    note(SimpleNamespace(session_hash="tab-2"))
    assert apply(first, None, SimpleNamespace(session_hash="tab-2")) == {status: gr.skip()}
    last = apply(first, None, SimpleNamespace(session_hash="tab-3"))  # another tab: the pick is shown
    assert sum(v == "hybrid" or getattr(v, "value", None) == "hybrid" for v in last.values()) == 2


def test_the_drafter_line_says_where_compile_stands():
    from types import SimpleNamespace

    def service(**kwargs):  # the members compile_note reads (specchat.service_api.ChatServiceProtocol)
        return SimpleNamespace(runtime_description=lambda drafter=None: "", **kwargs)

    assert app.compile_note(service(compile=False, compiled=None)) == ""
    compiling = app.compile_note(service(compile=True, compiled=None))
    assert "being compiled in the background" in compiling and "eagerly" in compiling
    done = app.compile_note(service(compile=True, compiled=object()))
    assert "target compiled" in done
    assert app.parse_args(["--compile"]).compile and not app.parse_args([]).compile
