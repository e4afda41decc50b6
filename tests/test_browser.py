"""End to end: the real app, served with SmolLM2-135M on 127.0.0.1, driven in headless Chromium.

Each test acts as a user (types, clicks Send / Stop, opens several tabs, closes one) and checks
what the page shows against first principles: the token colors against the legend's, the
reply's visible text against the target-only reply, injected HTML against its literal text.
Screenshots go to ``test-output/browser/`` (look at them after a run).

Needs Debian's ``chromium`` and ``chromium-driver`` and ``pip install selenium``; skipped
without them unless ``SPECCHAT_REQUIRE_BROWSER=1`` (set by ``.ci/run``), which turns the skip
into a failure.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-output" / "browser"
MISSING = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not Path(p).exists()]
try:
    import selenium  # noqa: F401
except ImportError:
    MISSING.append("selenium (pip install selenium)")
if MISSING:
    if os.environ.get("SPECCHAT_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"browser tests required but missing: {', '.join(MISSING)}")
    pytest.skip(f"needs {', '.join(MISSING)}", allow_module_level=True)

sys.path.insert(0, str(ROOT / "scripts"))
import drive_app  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind  # noqa: E402
from specchat.runtimes.transformers import TransformersRuntime
from specchat.service import ChatService, Pick  # noqa: E402
from specchat.ui.html.markdown import USER_MD  # noqa: E402
from specchat.ui.page import app  # noqa: E402

pytestmark = [pytest.mark.real_model, pytest.mark.browser]

PALINDROME = "Write a Python function that checks whether a string is a palindrome."
SCRIPT_PROMPT = 'Write a tiny HTML page whose <script> tag calls alert("hi"). Only the code.'


class RecordingService(ChatService):
    """The real ChatService; each chat turn is recorded (message, start/end, tokens, stop)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.runs: list[dict] = []
        self.token_delay_s = 0.0  # paces each token: a test that watches a reply stream for a while

    def stream_chat(self, history, message, **kwargs):
        run = {"message": message, "start": time.monotonic(), "end": None, "tokens": 0, "shown": 0, "rounds": 0,
               "stop": None, "text": None, "kinds": {}, "drafter": kwargs.get("drafter"),
               "history": [dict(m) for m in history], "continue_from": kwargs.get("continue_from")}
        self.runs.append(run)
        try:
            for item in super().stream_chat(history, message, **kwargs):
                if isinstance(item, TokenEvent):
                    run["tokens"] += 1
                    time.sleep(self.token_delay_s)
                    run["shown"] += bool(item.text)  # a span only for tokens that add text (not EOS)
                elif isinstance(item, RoundEvent):
                    run["rounds"] += 1
                elif isinstance(item, DoneEvent):
                    run["stop"], run["text"] = item.stop_reason, item.text
                    run["decode_ms"] = item.decode_ms
                    run["shown"] += bool(item.final_text)
                    run["kinds"] = {k: sum(x is k for x in item.kinds) for k in TokenKind}
                yield item
        finally:
            run["end"] = time.monotonic()

    def run_for(self, message: str) -> dict:
        return next(r for r in reversed(self.runs) if r["message"] == message)


def _serve(service) -> tuple:
    demo = app.build_ui(service, default_drafter="ngram")
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(
        server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, ssr_mode=False, share=False, css=app.CSS,
        head=app.CLICK_JS, app_kwargs=app.live_app_kwargs(),
    )
    return demo, url


@pytest.fixture(scope="module")
def served(smollm2_dir):
    """(url, service): the app on SmolLM2 (float32, drafter ngram), loaded and measured."""
    OUT.mkdir(parents=True, exist_ok=True)
    service = RecordingService(target=str(smollm2_dir), dtype="float32")
    service.start("ngram").join()
    assert service.startup_error is None, service.startup_error
    demo, url = _serve(service)
    yield url, service
    demo.close()


@pytest.fixture
def browser():
    """A factory of headless Chromium pages; every page is quit at the end of the test."""
    drivers = []

    def open_page(url: str):
        d = drive_app.driver(1280, 900)
        drivers.append(d)
        d.get(url)
        _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready")
        return d

    yield open_page
    for d in drivers:
        try:
            d.quit()
        except Exception:  # noqa: BLE001 - already closed by the test
            pass


def _wait_for(condition, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := condition():
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _set_slider(d, label: str, value: int) -> None:
    """Type a value into a slider's number box (the sliders of the side panel)."""
    drive_app.set_number(d, label, value)


REPLY_TEXT = "const b = document.querySelectorAll('#spec-chat .message.bot, #spec-chat [data-testid=bot]'); " \
    "return b.length ? b[b.length - 1].innerText : '';"
# textContent, not innerText: an exchange scrolled out of the window has `content-visibility: auto`
# and innerText reads '' for it (the window scrolled to a control below the chat hid the first bubbles)
QUEUED_NOTE = "queued: sent when the reply before it ends"  # under a message that waits (no toast)
USER_TEXTS = ("return [...document.querySelectorAll('#spec-chat [data-testid=user]')]"
              ".map(e => e.textContent.trim().replace(/\\s*\\n\\s*/g, '\\n\\n'));")


# The last reply: what it shows (the Markdown's text, without the code blocks' bars and the
# hidden rejected drafts) and the model's own text it carries for its copy button.
SHOWN = """
const bots = document.querySelectorAll('#spec-chat [data-testid=bot]');
const b = bots[bots.length - 1];
if (!b) return null;
const md = b.querySelector('.spec-md').cloneNode(true);
md.querySelectorAll('.spec-code-bar, .spec-rejected-run').forEach(n => n.remove());
return {shown: md.textContent, text: b.dataset.text ?? null};
"""


def _markdown_shown(text: str, md=None) -> str:
    """What markdown-it alone (``md``, the reply's parser by default) shows of ``text``
    (whitespace collapsed): the page must show the same."""
    from html.parser import HTMLParser

    from specchat.ui.html.markdown import MD

    chunks: list[str] = []
    parser = HTMLParser()
    parser.handle_data = chunks.append
    parser.feed((md or MD).render(text))
    return " ".join("".join(chunks).split())


def _assert_shows(d, text: str) -> None:
    """The page's last reply is exactly ``text``: the text it carries is the model's, and what it
    shows is markdown-it's rendering of it (no lost or doubled text)."""
    got = d.execute_script(SHOWN)
    assert got is not None and got["text"] == text, (got, text)
    assert " ".join(got["shown"].split()) == _markdown_shown(text)


def _kinds_agree(state: dict, run: dict) -> None:
    """Every kind the page shows, it shows for at most as many tokens as the engine committed (a
    token can be all markup, such as a code fence, and then shows nothing)."""
    for kind, n in state["kinds"].items():
        assert n <= run["kinds"][TokenKind(kind.removeprefix("tok-"))], (kind, state["kinds"], run["kinds"])


def test_three_token_colors_match_the_legend_and_the_charts_render(served, browser):
    url, service = served
    d = browser(url)
    drive_app.pick_drafter(d, "int4", 120)  # the NF4 copy of SmolLM2: long accepted runs and rejections
    assert "'int4' ready" in d.execute_script(drive_app.PAGE_STATE)["status"]
    # fixed γ: where a drafter does not pay on this CPU, adaptive γ pauses drafting (γ = 0 with
    # probes), and this test needs drafts to look at
    drive_app.set_checkbox(d, "adaptive γ", False)
    drive_app.send(d, PALINDROME)
    state = drive_app.wait_done(d, 300)
    drive_app.screenshot(d, str(OUT / "colors_and_charts.png"), width=1280)
    run = service.run_for(PALINDROME)
    # every kind appears (SmolLM2 + its int4 copy, greedy: the CLI gave 45 accepted, 8 resampled, 17 bonus)
    assert {"tok-accepted", "tok-resampled", "tok-bonus"} <= set(state["kinds"]), state["kinds"]
    _kinds_agree(state, run)
    # the stats line counts what the engine committed
    k = run["kinds"]
    assert (
        f"{run['tokens']} tokens in {run['rounds']} rounds: {k[TokenKind.ACCEPTED]} accepted, "
        f"{k[TokenKind.RESAMPLED]} resampled" in state["stats"]
    ), state["stats"]
    legend = d.execute_script(
        "const o = {}; document.querySelectorAll('.spec-legend .tok').forEach(e => "
        "{ o[e.className.replace('tok tok-', '')] = getComputedStyle(e).backgroundColor; }); return o;"
    )
    for kind in ("accepted", "resampled", "bonus"):
        assert state["colors"][f"tok-{kind}"] == legend[kind], (kind, state["colors"], legend)
        assert legend[kind] not in ("rgba(0, 0, 0, 0)", "transparent")
    assert len(set(legend[k] for k in ("accepted", "resampled", "bonus"))) == 3  # three different colors
    # the page shows exactly the reply the target produced (no lost or doubled text)
    _assert_shows(d, run["text"])
    # four plotly charts with data: acceptance, per position, speed, theory
    plots = d.execute_script(
        "return [...document.querySelectorAll('.spec-plot .js-plotly-plot')].map(p => "
        "({id: p.closest('.spec-plot').id, traces: (p.data || []).length, "
        "  points: (p.data || []).reduce((n, t) => n + ((t.y || []).length), 0), "
        "  svg: p.querySelectorAll('.main-svg').length}));"
    )
    assert sorted(p["id"] for p in plots) == ["plot-alpha", "plot-position", "plot-speed", "plot-theory", "plot-worth"], plots
    assert all(p["traces"] >= 1 and p["points"] >= 1 and p["svg"] >= 1 for p in plots), plots
    # the ledger of the reply: counted passes against target-only, and the α > c words
    ledger = d.execute_script("return document.querySelector('#spec-ledger').innerText")
    assert "Reply #1" in ledger and "target forward passes" in ledger and "Is this drafter worth it?" in ledger
    assert "α" in state["stats"] and "tok/s" in state["stats"]


def _inspect(d, css: str, index: int = 0) -> str:
    """Click the index-th clickable element matching ``css`` (a real click) and return the
    inspector's text once it has changed."""
    before = d.find_element(By.CSS_SELECTOR, "#spec-inspector").text
    # among the elements one can click: shown, with a box (a newline token has none)
    el = [e for e in d.find_elements(By.CSS_SELECTOR, css)
          if e.is_displayed() and e.size["width"] > 0 and e.size["height"] > 0][index]
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
    time.sleep(0.3)
    el.click()
    return _wait_for(lambda: (t := d.find_element(By.CSS_SELECTOR, "#spec-inspector").text) != before and t,
                     20, f"the inspector after clicking {css}")


def _decision(text: str) -> tuple[float, float, str]:
    """(u, min(1, p/q), verdict) as the inspector writes them."""
    import re

    m = re.search(r"min\(1, p/q\) = ([0-9.]+); the draw u = ([0-9.]+) (<|≥) [0-9.]+, so the draft was (accepted|rejected)", text)
    assert m, text
    return float(m.group(2)), float(m.group(1)), m.group(4)


def test_clicking_tokens_and_rounds_opens_the_inspector_and_the_race_runs(served, browser):
    """A real click on an accepted, a resampled and a bonus token of a greedy int4 reply: the
    inspector shows the round, u against min(1, p/q) on the right side of each other, the residual
    of the resampled token; a timeline round opens its first token; the rejected drafts appear
    inline; the race's texts at temperature 0 agree with the target-only reply."""
    url, service = served
    d = browser(url)
    drive_app.pick_drafter(d, "int4", 120)
    _set_slider(d, "max new tokens", 48)
    # fixed γ: where a drafter does not pay on this CPU, adaptive γ pauses drafting (γ = 0 with
    # probes), and this test needs drafts to look at
    drive_app.set_checkbox(d, "adaptive γ", False)
    drive_app.send(d, PALINDROME)
    drive_app.wait_done(d, 300)
    kinds = d.execute_script(drive_app.PAGE_STATE)["kinds"]
    assert {"tok-accepted", "tok-resampled", "tok-bonus"} <= set(kinds), kinds

    text = _inspect(d, "#spec-chat .tok-accepted", 2)
    assert "accepted draft" in text and "raw (softmax of the logits, T = 1)" in text
    # the inspector, below the chat, was brought into view (it was not: the token was in the middle)
    top = "return [document.getElementById('spec-inspector').getBoundingClientRect().top, innerHeight]"
    # (its top at 0 within a pixel: scrolled to a fraction of a pixel, it read -0.14 on one machine)
    _wait_for(lambda: -1 <= (t := d.execute_script(top))[0] < t[1] - 100, 5, "the inspector scrolled into view")
    u, ratio, verdict = _decision(text)
    assert verdict == "accepted" and u < ratio
    text = _inspect(d, "#spec-chat .tok-resampled")
    assert "resampled after draft" in text and "the residual norm(max(0, p − q))" in text
    u, ratio, verdict = _decision(text)
    assert verdict == "rejected" and u >= ratio
    drive_app.screenshot(d, str(OUT / "inspector_resampled.png"), width=1280)
    text = _inspect(d, "#spec-chat .tok-bonus")
    assert "bonus token after" in text and "extra position" in text

    # a timeline round selects the round's first token
    rounds = d.find_elements(By.CSS_SELECTOR, "#spec-timeline [class*=rref-]")
    assert len(rounds) >= 3
    text = _inspect(d, "#spec-timeline [class*=rref-]", 2)
    assert "round 3 ·" in text
    # the selected reply's trace can be downloaded
    assert "Download trace (reply #1)" in d.find_element(By.CSS_SELECTOR, "#spec-download").text

    # rejected drafts inline: one struck-through run before each resampled token that replaced a draft,
    # shown by the checkbox (in the browser, no round trip)
    def shown_rejected():
        return [e for e in d.find_elements(By.CSS_SELECTOR, "#spec-chat .tok-rejected") if e.is_displayed()]

    assert not shown_rejected()
    d.execute_script("[...document.querySelectorAll('label')].find(l => l.textContent.includes('show rejected drafts')).click()")
    _wait_for(shown_rejected, 20, "rejected drafts inline")
    resampled = service.run_for(PALINDROME)["kinds"][TokenKind.RESAMPLED]
    assert len(d.find_elements(By.CSS_SELECTOR, "#spec-chat .spec-rejected-run")) == resampled

    # the race, greedy: the target-only lane is the target's greedy reply; the texts agree
    _set_slider(d, "max new tokens", 24)
    d.find_element(By.CSS_SELECTOR, "#spec-input textarea").send_keys("Say hello in French.")
    drive_app.button(d, "Race: target only vs drafter").click()
    verdict = _wait_for(lambda: (t := d.find_element(By.CSS_SELECTOR, "#spec-race").text) and
                        ("faster" in t or "slower" in t) and t, 240, "the race's verdict")
    drive_app.screenshot(d, str(OUT / "race.png"), width=1280)
    assert "target only" in verdict and "int4" in verdict and "done in" in verdict
    assert "Identical text, token for token" in verdict or "logits" in verdict, verdict
    assert d.find_element(By.CSS_SELECTOR, "#spec-input textarea").get_attribute("value") == "Say hello in French."


def test_a_code_block_is_highlighted_with_a_copy_button_and_its_tokens_open_the_inspector(served, browser):
    """SmolLM2 answers PALINDROME with a fenced Python block: the page shows it as code (Pygments'
    keyword colour, no fence characters), its copy button copies the code exactly as the model
    wrote it, a click on a token inside the code opens the inspector, and "plain" drops the tints."""
    url, service = served
    d = browser(url)
    drive_app.send(d, PALINDROME)
    drive_app.wait_done(d, 300)
    run = service.run_for(PALINDROME)
    code_text = run["text"].split("```", 2)[1].split("\n", 1)[1]  # the model's code, between the fences
    assert code_text.strip(), run["text"]
    block = d.find_element(By.CSS_SELECTOR, "#spec-chat .spec-code")
    assert block.find_element(By.CSS_SELECTOR, ".spec-code-lang").text == "python"
    keyword = next(e for e in block.find_elements(By.CSS_SELECTOR, "pre code span.k") if e.text == "def")
    plain_colour = d.execute_script("return getComputedStyle(document.querySelector('#spec-chat .spec-md')).color")
    assert keyword.value_of_css_property("color") != plain_colour  # highlighted
    assert "```" not in block.text and "def" in block.text
    drive_app.screenshot(d, str(OUT / "code_block.png"), width=1280)
    # the copy button copies the code as written (captured: headless Chromium has no clipboard to read)
    d.execute_script("window.__copied = null; navigator.clipboard.writeText = async (t) => { window.__copied = t; };")
    button = block.find_element(By.CSS_SELECTOR, ".spec-copy")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    button.click()
    assert _wait_for(lambda: d.execute_script("return window.__copied"), 10, "the copied code") == code_text
    assert _wait_for(lambda: button.text == "copied ✓", 5, "the button's word")
    # a token inside the code opens the inspector on its round
    text = _inspect(d, "#spec-chat .spec-code .tok")
    assert "reply #1 · round" in text
    # colours, then plain: the tints go, the text stays
    tinted = [e for e in block.find_elements(By.CSS_SELECTOR, ".tok:not(.tok-target):not(.tok-ws)")]
    colours = {e.value_of_css_property("background-color") for e in tinted}
    d.execute_script("[...document.querySelectorAll('#spec-colours label')].find(l => l.textContent.includes('plain')).click()")
    _wait_for(lambda: d.execute_script("return document.querySelector('#spec-chat .spec-transcript')"
                                       ".classList.contains('spec-plain')"), 10, "plain")
    if tinted:
        assert colours - {"rgba(0, 0, 0, 0)"}  # there were tints to drop
        assert {e.value_of_css_property("background-color") for e in tinted} == {"rgba(0, 0, 0, 0)"}
    assert "def" in block.text


def test_html_in_the_prompt_and_in_the_reply_stays_inert_text(served, browser):
    url, service = served
    d = browser(url)
    d.execute_script("window.__pwned = 0;")
    injected = (
        '<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> '
        '<div style="position:fixed;inset:0;background:red">cover</div> **bold** '
    )
    message = injected + SCRIPT_PROMPT
    drive_app.send(d, message)
    drive_app.wait_done(d, 180)
    drive_app.screenshot(d, str(OUT / "html_inert.png"), width=1280)
    run = service.run_for(message)
    assert "<script>" in run["text"] and "alert" in run["text"]  # the model did write a script tag
    with pytest.raises(NoAlertPresentException):
        d.switch_to.alert.text  # noqa: B018 - alert("hi") never ran
    assert d.execute_script("return window.__pwned") == 0
    chat = d.find_element(By.ID, "spec-chat")
    assert chat.find_elements(By.TAG_NAME, "script") == [] and chat.find_elements(By.TAG_NAME, "img") == []
    assert chat.find_elements(By.TAG_NAME, "b") == []  # the model's <b> is text (Markdown bold is <strong>)
    user = chat.find_elements(By.CSS_SELECTOR, "[data-testid=user]")[-1]
    # the user's message is Markdown without emphasis (issue 45; a name such as __repr__ shows as
    # typed): **bold** keeps its stars, its HTML is the literal text
    assert user.find_elements(By.TAG_NAME, "strong") == [] and "**bold**" in user.text
    # shown as the literal text: the user's message as markdown-it shows it, the reply exactly as generated
    assert " ".join(d.execute_script(USER_TEXTS)[-1].split()) == _markdown_shown(message, USER_MD)
    assert '<img src=x onerror="window.__pwned=1">' in d.execute_script(USER_TEXTS)[-1]
    _assert_shows(d, run["text"])
    # nothing covers the page: the textbox is still the element at its own center
    assert d.execute_script(
        "const e = document.querySelector('#spec-input textarea'); const r = e.getBoundingClientRect();"
        "return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === e;"
    )


def test_stop_keeps_the_partial_reply_and_the_next_message_works(served, browser):
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 1024)
    message = "Write a long story about a lighthouse keeper, in ten paragraphs."
    stop_bg = "return getComputedStyle(document.getElementById('spec-stop')).backgroundColor"
    idle = d.execute_script(stop_bg)
    drive_app.send(d, message)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 8, 60, "tokens to stream")
    assert d.execute_script(stop_bg) != idle  # Stop is red only while there is something to stop
    # the reply's text streams through its live channel (specchat/ui/session/live.py), past Gradio's stream
    live = "return document.querySelector('#spec-chat .spec-transcript').liveUpdates || 0"
    _wait_for(lambda: d.execute_script(live) >= 2, 30, "updates on the live channel")
    # and the stats line with it: the reply's figures while it streams (Gradio sent "generating…")
    _wait_for(lambda: "tok/s" in d.execute_script(drive_app.PAGE_STATE)["stats"], 15, "the stats line mid-reply")
    assert service.run_for(message)["end"] is None  # still streaming
    drive_app.button(d, "Stop").click()
    run = _wait_for(lambda: (r := service.run_for(message))["end"] is not None and r, 30, "the run to end")
    assert run["stop"] is StopReason.CANCELLED and 8 <= run["tokens"] < 1024
    drive_app.wait_done(d, 30)
    assert d.execute_script(stop_bg) == idle
    drive_app.screenshot(d, str(OUT / "stopped.png"), width=1280)
    _assert_shows(d, run["text"])  # the partial reply stays on the page, whole
    assert "stopped" in d.execute_script(REPLY_TEXT)
    assert service.engine.released  # the engine released its state
    # the next message works and the stopped reply stays in the conversation
    drive_app.send(d, "Say hi.")
    drive_app.wait_done(d, 120)
    assert service.run_for("Say hi.")["stop"] in (StopReason.EOS, StopReason.MAX_NEW_TOKENS)
    assert d.execute_script(USER_TEXTS)[-2:] == [message, "Say hi."]


def test_the_panels_on_screen_redraw_while_a_reply_streams(served, browser):
    """The reply's stream carries only its text and the stats line; the timeline and the charts,
    when on screen, are drawn while it streams by the panel tick, not only at its end."""
    url, service = served
    d = browser(url)
    d.set_window_size(1440, 3600)  # every panel on screen
    _set_slider(d, "max new tokens", 1024)
    message = "Write a long story about a sailor and a lighthouse, in ten paragraphs."
    drive_app.send(d, message)
    rows = "return document.querySelectorAll('#spec-timeline [class*=rref-]').length"
    _wait_for(lambda: d.execute_script(rows) > 0, 60, "the timeline to fill in")
    assert service.run_for(message)["end"] is None  # drawn while the reply streams
    assert d.execute_script("return document.querySelectorAll('#plot-speed .js-plotly-plot').length") == 1
    drive_app.button(d, "Stop").click()
    drive_app.wait_done(d, 30)
    run = service.run_for(message)
    # while streaming it shows the last 24 rounds at most; at the end, every round of the reply
    _wait_for(lambda: d.execute_script(rows) == run["rounds"], 20, "the whole timeline")


BUBBLE_TOKENS = "return [...document.querySelectorAll('#spec-chat [data-testid=bot]')].map(b => b.dataset.text);"


def test_a_message_sent_while_a_reply_streams_waits_and_nothing_typed_is_lost(served, browser):
    """Enter pressed while a reply streams: the new message queues; the streaming reply is not
    redrawn as it was at that moment; text typed afterwards stays in the box."""
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 160)
    first, second = "Write a long story about a lighthouse keeper.", "Name three colors."
    drive_app.send(d, first)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 5, 60, "tokens to stream")
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    box.send_keys(second, Keys.ENTER)
    _wait_for(lambda: box.get_attribute("value") == "", 10, "the box to empty")
    _wait_for(lambda: QUEUED_NOTE in " ".join(d.execute_script(USER_TEXTS)), 10, "the 'queued' note in the chat")
    box.send_keys("a draft I am still typing")
    _wait_for(lambda: any(r["message"] == second and r["end"] for r in service.runs), 240, "the second reply")
    drive_app.wait_done(d, 60)
    drive_app.screenshot(d, str(OUT / "sent_while_streaming.png"), width=1280)
    runs = [service.run_for(first), service.run_for(second)]
    assert runs[0]["end"] <= runs[1]["start"]  # queued behind the first, not interleaved
    assert d.execute_script(USER_TEXTS) == [first, second]
    assert d.execute_script(BUBBLE_TOKENS) == [runs[0]["text"], runs[1]["text"]]  # both whole
    assert box.get_attribute("value") == "a draft I am still typing"


def _ended(service, message: str, after: int = 0) -> dict | None:
    """The service's run of ``message`` once it has ended (None before it started or while it
    runs), among its runs from number ``after`` on (an earlier test may have sent the same text)."""
    return next((r for r in reversed(service.runs[after:]) if r["message"] == message and r["end"] is not None), None)


def test_a_queued_message_shows_at_once_with_its_own_cancel(served, browser):
    """Sent while a reply streams, a message is in the chat at once, marked queued, with a cancel
    button of its own: it withdraws that message only; the reply streaming goes on, the next
    queued message runs after it."""
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 160)
    first, second, third = "Write a long story about a clockmaker.", "Name three rivers.", "Name three mountains."
    drive_app.send(d, first)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 5, 60, "tokens to stream")
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    for message in (second, third):
        box.send_keys(message, Keys.ENTER)
        _wait_for(lambda: box.get_attribute("value") == "", 10, "the box to empty")
    users = lambda: d.execute_script(USER_TEXTS)  # noqa: E731
    _wait_for(lambda: len(users()) == 3 and all("queued" in u for u in users()[1:]), 30, "both queued bubbles")
    assert service.run_for(first)["end"] is None  # shown while the first reply streams
    assert len(d.find_elements(By.CSS_SELECTOR, "#spec-chat .spec-unqueue")) == 2
    drive_app.screenshot(d, str(OUT / "queued.png"), width=1280)
    d.find_elements(By.CSS_SELECTOR, "#spec-chat .spec-unqueue")[0].click()  # the second's own cancel
    _wait_for(lambda: "not sent: you cancelled it" in users()[1], 15, "the cancelled bubble")
    _wait_for(lambda: any(r["message"] == third and r["end"] for r in service.runs), 300, "the third reply")
    drive_app.wait_done(d, 60)
    assert service.run_for(first)["stop"] is not StopReason.CANCELLED  # the streaming reply went on
    assert not any(r["message"] == second for r in service.runs)  # it never reached the model
    assert users()[0] == first and users()[1].startswith(second) and users()[2] == third
    # the cancelled message has no reply (its reply slot stays empty and hidden)
    assert d.execute_script(BUBBLE_TOKENS) == [service.run_for(first)["text"], None, service.run_for(third)["text"]]


def test_the_conversation_survives_a_reload_and_the_system_prompt_reaches_the_model(served, browser):
    url, service = served
    d = browser(url)
    system = "Answer in one short sentence."
    d.find_element(By.CSS_SELECTOR, "#spec-system textarea").send_keys(system)
    _set_slider(d, "max new tokens", 48)
    first, before = "What is a lighthouse?", len(service.runs)
    drive_app.send(d, first)
    run = _wait_for(lambda: _ended(service, first, before), 120, "the reply")
    drive_app.wait_done(d, 30)
    assert run["history"] == [{"role": "system", "content": system}]  # given first, through the chat template
    time.sleep(2)  # the page keeps the conversation in the browser once the reply has settled
    d.refresh()
    _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready again")
    _wait_for(lambda: d.execute_script(USER_TEXTS) == [first], 20, "the conversation restored")
    assert d.execute_script(BUBBLE_TOKENS) == [run["text"]]
    assert "restored (after a reload" in d.execute_script(REPLY_TEXT)
    assert d.find_element(By.CSS_SELECTOR, "#spec-system textarea").get_attribute("value") == system
    # the charts say why they are empty (not "send a message")
    _wait_for(lambda: "restored as text" in d.find_element(By.CSS_SELECTOR, "#plot-alpha").text, 20, "the charts' hint")
    drive_app.screenshot(d, str(OUT / "restored.png"), width=1280)
    second, before = "And a harbour?", len(service.runs)
    drive_app.send(d, second)
    run2 = _wait_for(lambda: _ended(service, second, before), 120, "the next reply")
    drive_app.wait_done(d, 30)
    # the model sees the conversation from before the reload, after the system prompt
    assert run2["history"] == [{"role": "system", "content": system}, {"role": "user", "content": first},
                               {"role": "assistant", "content": run["text"]}]
    assert d.execute_script(USER_TEXTS) == [first, second] and "#2 · ngram" in d.execute_script(drive_app.PAGE_STATE)["stats"]
    # Clear empties the browser's copy too: a reload after it shows an empty chat
    drive_app.button(d, "Clear chat").click()
    _wait_for(lambda: d.execute_script(USER_TEXTS) == [], 10, "the chat emptied")
    time.sleep(2)
    d.refresh()
    _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready again")
    time.sleep(3)  # the restore runs with the page's load
    assert d.execute_script(USER_TEXTS) == []
    # a system prompt typed and not sent yet is kept too (in an empty chat: nothing else is kept)
    box = d.find_element(By.CSS_SELECTOR, "#spec-system textarea")
    box.clear()
    box.send_keys("Reply in French.")
    time.sleep(2)
    d.refresh()
    _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready again")
    _wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#spec-system textarea").get_attribute("value") == "Reply in French.",
              10, "the unsent system prompt restored")


def test_a_long_message_shows_its_prefill_and_stop_ends_it_there(served, browser):
    """A message of thousands of tokens: the reply shows the prefill's progress (count, time, bar)
    while the target reads it; Stop ends it before its next forward pass, nothing is generated
    and nothing of it is kept for the model; the next message runs."""
    url, service = served
    d = browser(url)
    long = "Summarise this log.\n" + "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    d.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
                     box, long)
    before = len(service.runs)
    drive_app.button(d, "Send").click()
    bar = "const p = document.querySelector('#spec-chat .spec-prefill'); return p ? p.innerText : '';"
    shown = _wait_for(lambda: d.execute_script(bar), 60, "the prefill's progress")
    match = re.search(r"Reading your message: ([\d,]+) of ([\d,]+) tokens", shown)
    assert match, shown
    total = int(match.group(2).replace(",", ""))
    assert total > 6000 and len(service.tokenizer(long)["input_ids"]) <= total + 1  # the message, templated
    assert service.run_for(long)["end"] is None
    drive_app.screenshot(d, str(OUT / "prefill.png"), width=1280)
    clicked = time.monotonic()
    drive_app.button(d, "Stop").click()
    run = _wait_for(lambda: _ended(service, long, before), 30, "the prefill to stop")
    assert run["stop"] is StopReason.CANCELLED and run["tokens"] == 0
    assert run["end"] - clicked < 10  # at the next forward pass, not at the end of the prefill
    _wait_for(lambda: "stopped while reading your message" in d.execute_script(REPLY_TEXT), 20, "the stopped note")
    assert service.engine.released
    before = len(service.runs)
    drive_app.send(d, "Say hi.")
    hi = _wait_for(lambda: _ended(service, "Say hi.", before), 120, "the next reply")
    assert hi["history"] == [] and hi["stop"] in (StopReason.EOS, StopReason.MAX_NEW_TOKENS)


def test_clear_mid_stream_empties_the_chat_for_good(served, browser):
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 512)
    message = "Write a long poem about the sea."
    drive_app.send(d, message)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 5, 60, "tokens to stream")
    # toasts are closed first, as a person would (before page.css put them at the top centre, one at
    # the bottom right sat over Clear once, on a busy machine)
    for close in d.find_elements("css selector", "[data-testid=toast-close]"):
        d.execute_script("arguments[0].click();", close)
    drive_app.button(d, "Clear chat").click()
    run = _wait_for(lambda: (r := service.run_for(message))["end"] is not None and r, 30, "the run to end")
    assert run["stop"] is StopReason.CANCELLED
    time.sleep(3)  # the stream's completion message arrives after Clear: it must not bring the chat back
    assert d.execute_script(USER_TEXTS) == [] and d.execute_script(drive_app.PAGE_STATE)["tokens"] == 0
    assert not d.execute_script(drive_app.PAGE_STATE)["stats"].rstrip().endswith("…")
    drive_app.send(d, "Say hi.")
    drive_app.wait_done(d, 120)
    assert d.execute_script(USER_TEXTS) == ["Say hi."]
    assert service.run_for("Say hi.")["message"] == "Say hi."


def test_the_last_drafter_picked_while_a_reply_streams_is_the_one_used(served, browser):
    """Several quick picks while the model is busy: the last pick wins, on the page and in use."""
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 96)
    drive_app.send(d, "Write a short story about a cat.")
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 3, 60, "tokens to stream")
    for kind in ("int4", "none", "ngram", "int4", "none"):
        drive_app.pick_drafter(d, kind, 0)
        time.sleep(0.3)
    drive_app.wait_done(d, 180)
    status = "return document.querySelector('#spec-drafter-status').innerText"
    _wait_for(lambda: "'none' ready" in d.execute_script(status), 120, "the last pick to be prepared")
    chosen = d.execute_script("return document.querySelector('#spec-drafter input').value")
    assert chosen == "none"
    drive_app.send(d, "Say hi.")
    drive_app.wait_done(d, 120)
    assert service.run_for("Say hi.")["drafter"] == "none"


def test_closing_the_tab_mid_stream_stops_the_work_on_the_server(served, browser):
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 1024)
    message = "Write a long essay about the history of computing, in twelve paragraphs."
    drive_app.send(d, message)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 8, 60, "tokens to stream")
    closed_at = time.monotonic()
    d.quit()
    run = _wait_for(lambda: (r := service.run_for(message))["end"] is not None and r, 60, "the server to stop")
    assert run["stop"] in (StopReason.CANCELLED, None), run  # None: the stream was closed by the server
    assert run["tokens"] < 1024 and run["end"] - closed_at < 30, run
    assert service.engine.released


def test_three_sessions_at_once_queue_and_stay_separate(served, browser):
    url, service = served
    pages = [browser(url) for _ in range(3)]
    messages = ["Name three fruits.", "Name three colors.", "Name three animals."]
    for d in pages:
        _set_slider(d, "max new tokens", 32)
    for d, message in zip(pages, messages):  # sent within a second: they queue behind one another
        drive_app.send(d, message)
    states = [drive_app.wait_done(d, 240) for d in pages]
    for i, d in enumerate(pages):
        drive_app.screenshot(d, str(OUT / f"session_{i}.png"), width=1280)
    runs = [service.run_for(m) for m in messages]
    for d, message, state, run in zip(pages, messages, states, runs):
        assert d.execute_script(USER_TEXTS) == [message]  # only its own message
        _assert_shows(d, run["text"])  # only its own reply
        _kinds_agree(state, run)
        assert f"{run['tokens']} tokens in {run['rounds']} rounds" in state["stats"], state["stats"]  # its own stats
    # the model ran one request at a time (concurrency_limit=1): the runs never overlap
    spans = sorted((r["start"], r["end"]) for r in runs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def test_a_drafter_that_fails_to_load_falls_back_to_target_only_visibly(smollm2_dir, browser, tmp_path):
    """The sibling drafter points at a directory that does not exist: the app starts anyway,
    says so, answers with the target only, and keeps the chat."""
    service = RecordingService(target=str(smollm2_dir), dtype="float32", drafter_model=str(tmp_path / "missing"))
    service.start("sibling").join()
    assert service.startup_error is None and "sibling" in service.drafter_errors
    demo = app.build_ui(service, default_drafter="sibling")
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(
        server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, ssr_mode=False, share=False, css=app.CSS,
        head=app.CLICK_JS, app_kwargs=app.live_app_kwargs(),
    )
    try:
        d = drive_app.driver(1280, 900)
        try:
            d.get(url)
            status = _wait_for(
                lambda: "could not be loaded" in (s := d.execute_script(drive_app.PAGE_STATE)["status"]) and s,
                60, "the fallback message",
            )
            assert "sibling" in status and "target only" in status
            drive_app.send(d, "Say hi.")
            state = drive_app.wait_done(d, 120)
            drive_app.screenshot(d, str(OUT / "drafter_fallback.png"), width=1280)
            run = service.run_for("Say hi.")
            assert state["kinds"].keys() == {"tok-target"}  # target-only rounds, drawn as such
            assert run["text"]
            _assert_shows(d, run["text"])
        finally:
            d.quit()
    finally:
        demo.close()


def test_a_message_sent_before_the_start_up_pick_runs_with_the_pick_and_says_so(smollm2_dir, monkeypatch):
    """--drafter auto: the pick by measurement is held back until the test releases it. A page
    opened while the models load shows "auto" in the menu; its message waits and runs with the
    pick (labelled so); a page opened at Ready and one just after say the pick in the menu, and
    their reply #1 is labelled with the drafter the service actually ran."""
    release = threading.Event()
    service = RecordingService(target=str(smollm2_dir), dtype="float32")

    def pick_drafter(**kwargs):
        assert release.wait(120)
        return Pick("ngram", "the test's pick")

    monkeypatch.setattr(service, "pick_drafter", pick_drafter)
    service.start("auto")
    demo = app.build_ui(service, default_drafter="auto")
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, ssr_mode=False,
                            share=False, css=app.CSS, head=app.CLICK_JS,
                            app_kwargs=app.live_app_kwargs())
    menu = "return (document.querySelector('input[aria-label=drafter]') || {}).value || ''"
    label = "return [...document.querySelectorAll('#spec-chat .spec-label')].map(e => e.innerText)"
    drivers = []
    try:
        early = drive_app.driver(1280, 900)
        drivers.append(early)
        early.get(url)
        _wait_for(lambda: early.find_elements(By.CSS_SELECTOR, "#spec-input textarea"), 60, "the page")
        assert early.execute_script(menu).startswith("auto")  # not a placeholder kind
        drive_app.send(early, "Say hi.")
        _wait_for(lambda: early.execute_script(label), 30, "the waiting reply")
        assert "auto" in early.execute_script(label)[0]  # waiting for the pick, and saying so
        release.set()
        drive_app.wait_done(early, 180)
        run = service.run_for("Say hi.")
        assert run["drafter"] == "ngram"
        assert early.execute_script(label)[0].startswith("#1 · ngram ·")
        for moment in ("at Ready", "just after"):
            d = drive_app.driver(1280, 900)
            drivers.append(d)
            d.get(url)
            _wait_for(lambda d=d: d.find_elements(By.CSS_SELECTOR, "#spec-input textarea"), 60, "the page")
            message = f"Name a colour ({moment})."
            drive_app.send(d, message)  # at once, whatever the menu shows yet
            drive_app.wait_done(d, 180)
            assert service.run_for(message)["drafter"] == "ngram"
            assert d.execute_script(label)[0].startswith("#1 · ngram ·"), moment
            _wait_for(lambda d=d: d.execute_script(menu) == "ngram", 30, f"the pick in the menu ({moment})")
    finally:
        for d in drivers:
            d.quit()
        demo.close()


@pytest.mark.drafter_failure
def test_a_drafter_that_runs_out_of_memory_mid_reply_falls_back_visibly(served, browser, monkeypatch):
    url, service = served
    ngram = service.prepare_drafter("ngram")
    calls = {"n": 0}
    real_propose = ngram.propose

    def propose(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("simulated: out of memory while drafting")
        return real_propose(*args, **kwargs)

    monkeypatch.setattr(ngram, "propose", propose)
    d = browser(url)
    # fixed γ: where a drafter does not pay on this CPU, adaptive γ pauses drafting (γ = 0 with
    # probes), and this test needs drafts to look at
    drive_app.set_checkbox(d, "adaptive γ", False)
    drive_app.send(d, PALINDROME)
    drive_app.wait_done(d, 180)
    drive_app.screenshot(d, str(OUT / "drafter_oom.png"), width=1280)
    run = service.run_for(PALINDROME)
    assert calls["n"] == 3  # never asked again in that reply
    reply = d.execute_script(REPLY_TEXT)
    assert "The drafter 'ngram' failed (MemoryError: simulated" in reply and "target alone" in reply
    _assert_shows(d, run["text"])
    # the reply is the target's own greedy reply (as generated by the target alone)
    monkeypatch.undo()
    alone = [e for e in service.stream_chat([], PALINDROME, drafter="none", config=_greedy(256))]
    assert alone[-1].text == run["text"]


def _shown_speedup(d) -> float:
    stats = d.execute_script(drive_app.PAGE_STATE)["stats"]
    shown = drive_app.shown_speedup(stats)
    assert shown is not None, stats
    return shown


class Hog:
    """Another process spinning on one core (the 'busy machine'), started and stopped by PID."""

    def __enter__(self):
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.mark.parametrize("busy", [False, True])
def test_target_only_shows_one_x_on_a_quiet_and_on_a_busy_machine(served, browser, busy):
    """The drafter 'none' against target-only steps timed during the same reply: 1.00× ± 0.10,
    also when another process starts spinning on a core after the page became ready (the old
    start-up baseline went stale there and showed anything from 0.65× to 5.7×)."""
    url, service = served
    d = browser(url)
    drive_app.pick_drafter(d, "none", 60)
    _set_slider(d, "max new tokens", 128)
    with Hog() if busy else _nothing():
        drive_app.send(d, PALINDROME)
        drive_app.wait_done(d, 240)
    drive_app.screenshot(d, str(OUT / f"none_{'busy' if busy else 'quiet'}.png"), width=1280)
    shown = _shown_speedup(d)
    assert abs(shown - 1.0) <= 0.10, shown
    reply = d.execute_script(REPLY_TEXT)
    assert "target steps timed in this reply (95 % interval)" in reply and "#" in reply


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_replies_are_labeled_and_the_table_keeps_the_conversation(served, browser):
    """Three replies with three drafters: each bubble says what made it and ends with its own
    summary; the table has a row per reply with the engine's own counts; the charts switch to
    the whole conversation."""
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 64)
    messages = {"ngram": "Name three trees.", "none": "Name three birds.", "int4": "Name three metals."}
    for drafter, message in messages.items():
        drive_app.pick_drafter(d, drafter, 120)
        drive_app.send(d, message)
        drive_app.wait_done(d, 240)
    labels = d.execute_script("return [...document.querySelectorAll('#spec-chat .spec-label')].map(e => e.innerText);")
    assert [label.split(" · ")[:2] for label in labels] == [["#1", "ngram"], ["#2", "none"], ["#3", "int4"]], labels
    assert all("T 0 (greedy) · top-p 1" in label for label in labels)
    summaries = d.execute_script("return [...document.querySelectorAll('#spec-chat .spec-summary')].map(e => e.innerText);")
    rows = d.execute_script(
        "return [...document.querySelectorAll('#spec-table tbody tr')].map(r => [...r.cells].map(c => c.innerText));")
    assert [r[1] for r in rows] == ["ngram", "none", "int4"]
    for message, summary, row in zip(messages.values(), summaries, rows):
        run = service.run_for(message)
        assert summary.startswith(f"{run['tokens']} tokens") and row[4] == str(run["tokens"])
        assert f"{run['tokens'] / run['rounds']:.2f} tokens/round" in summary and row[6] == f"{run['tokens'] / run['rounds']:.2f}"
    d.find_element(By.XPATH, "//label[contains(., 'whole conversation')]").click()
    _wait_for(lambda: "Speedup by reply" in d.execute_script(
        "return document.querySelector('#plot-speed').innerText"), 30, "the conversation charts")
    drive_app.screenshot(d, str(OUT / "conversation_table.png"), width=1280)
    bars = d.execute_script("const p = document.querySelector('#plot-speed .js-plotly-plot'); return p.data[0].x;")
    assert bars == ["#1 ngram", "#2 none", "#3 int4"]


def test_one_stop_stops_the_reply_and_cancels_the_waiting_message(served, browser):
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 1024)
    first, second = "Write a long story about a lost robot.", "Name three planets."
    drive_app.send(d, first)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 5, 60, "tokens to stream")
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    box.send_keys(second, Keys.ENTER)
    _wait_for(lambda: QUEUED_NOTE in " ".join(d.execute_script(USER_TEXTS)), 10, "the 'queued' note in the chat")
    drive_app.button(d, "Stop").click()
    toast = "return [...document.querySelectorAll('.toast-body, [data-testid=toast-body]')].map(e => e.innerText).join(' ')"
    _wait_for(lambda: "cancelled and not sent" in d.execute_script(toast), 10, "the Stop notice")
    _wait_for(lambda: "not sent" in " ".join(d.execute_script(USER_TEXTS)), 60, "the cancelled message shown")
    time.sleep(2)
    drive_app.screenshot(d, str(OUT / "stop_cancels_queued.png"), width=1280)
    assert service.run_for(first)["stop"] is StopReason.CANCELLED
    assert not any(r["message"] == second for r in service.runs)  # it never reached the model
    users = d.execute_script(USER_TEXTS)
    assert users[0] == first and users[1].startswith(second) and "not sent" in users[1]
    stats = d.execute_script(drive_app.PAGE_STATE)["stats"]
    assert "#1 · ngram" in stats and f"{service.run_for(first)['tokens']} tokens in" in stats  # the stopped reply's


def test_the_page_reads_well_at_820_px_and_toasts_do_not_cover_the_drafter_menu(served, browser):
    """At 820 px: no sideways scrolling; a warning's toast sits at the top centre (page.css) and
    covers none of the drafter menu, the message box, Send and Stop (at Gradio's bottom right it
    covered the settings); a queued message is said in the chat, not by a toast (one covered Stop
    on a scrolled page)."""
    url, service = served
    d = browser(url)
    d.set_window_size(820, 1000)
    time.sleep(1)
    assert d.execute_script("return document.documentElement.scrollWidth") <= 820
    toasts = "return [...document.querySelectorAll('.toast-body, [data-testid=toast-body]')]" \
        ".map(t => JSON.parse(JSON.stringify(t.getBoundingClientRect())));"
    drive_app.button(d, "Send").click()  # an empty box: a warning's toast
    rects = _wait_for(lambda: d.execute_script(toasts), 10, "a toast")
    time.sleep(0.5)  # its entrance animation
    rects = d.execute_script(toasts)
    assert all(r["top"] <= 40 for r in rects), rects
    for covered in ("#spec-drafter input", "#spec-input textarea", "#spec-send", "#spec-stop"):
        box = d.execute_script(f"return JSON.parse(JSON.stringify(document.querySelector('{covered}').getBoundingClientRect()));")
        for rect in rects:
            overlap = not (rect["right"] <= box["left"] or box["right"] <= rect["left"]
                           or rect["bottom"] <= box["top"] or box["bottom"] <= rect["top"])
            assert not overlap, (covered, rect, box)
    # a page scrolled so that the message box and Send sit under the toast: a click there still
    # reaches them (each one the toast overlaps sideways; at 820 px Send is right of a centred toast)
    hit = ("const t = document.querySelector('.toast-body, [data-testid=toast-body]').getBoundingClientRect(); "
           "const s = document.querySelector(arguments[0]); window.scrollBy(0, s.getBoundingClientRect().top - t.top - 4); "
           "const b = s.getBoundingClientRect(); if (b.right <= t.left || b.left >= t.right) return null; "
           "const x = Math.min(Math.max(b.left + b.width / 2, t.left + 2), t.right - 2); "
           "return [b.top < t.bottom, s.contains(document.elementFromPoint(x, b.top + 4))];")
    hits = [d.execute_script(hit, target) for target in ("#spec-send", "#spec-input textarea")]
    assert [True, True] in hits and all(h in (None, [True, True]) for h in hits), hits
    for close in d.find_elements("css selector", "[data-testid=toast-close]"):
        d.execute_script("arguments[0].click();", close)
    _wait_for(lambda: not d.execute_script(toasts), 10, "the toast to close")
    _set_slider(d, "max new tokens", 48)
    drive_app.send(d, "Name three rivers.")
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    box.send_keys("Name three mountains.", Keys.ENTER)  # a second message: queued
    _wait_for(lambda: QUEUED_NOTE in " ".join(d.execute_script(USER_TEXTS)), 10, "the 'queued' note in the chat")
    assert not d.execute_script(toasts)  # nothing over the page (Stop was under the toast on this scrolled page)
    drive_app.wait_done(d, 120)
    _wait_for(lambda: any(r["message"] == "Name three mountains." and r["end"] for r in service.runs), 120,
              "the second reply")
    drive_app.wait_done(d, 60)
    assert d.execute_script("return document.documentElement.scrollWidth") <= 820
    # each action button's label fits it (a tester: "✎ Edit last message" ran over its edges here)
    spills = d.execute_script("return [...document.querySelectorAll('#spec-actions button')]"
                              ".filter(b => b.scrollWidth > b.clientWidth + 1).map(b => b.innerText);")
    assert not spills, spills
    drive_app.screenshot(d, str(OUT / "narrow_820.png"), width=820)


def _serve_llamacpp(drafter: str) -> tuple:
    """(service, demo, url): the app on llama.cpp, SmolLM2's GGUF as the target (one thread) and its
    own weights as the sibling in a second context, started with ``drafter``; skips the test when
    llama.cpp is unavailable."""
    from specchat.runtimes import llamacpp

    if llamacpp.unavailable_reason():
        pytest.skip(llamacpp.unavailable_reason())
    service = RecordingService(target="smollm2-135m-instruct", runtime="llamacpp", drafter_model="smollm2-135m-instruct",
                               threads=1)
    service.start(drafter).join()
    assert service.startup_error is None, service.startup_error
    return (service, *_serve(service))


def test_the_page_works_the_same_on_the_llamacpp_runtime(browser):
    """SmolLM2's GGUF as it is on llama.cpp (no conversion), its own weights as the sibling in a
    second context, the hybrid drafter: the status line says what runs each model, the reply is
    colored, the charts and the ledger are drawn and a token opens the inspector."""
    service, demo, url = _serve_llamacpp("hybrid")
    try:
        d = browser(url)
        drive_app.pick_drafter(d, "hybrid", 120)
        status = d.execute_script(drive_app.PAGE_STATE)["status"]
        assert "target on llama.cpp (Q4_1" in status and "drafter on llama.cpp" in status, status
        drive_app.send(d, PALINDROME)
        state = drive_app.wait_done(d, 300)
        drive_app.screenshot(d, str(OUT / "llamacpp_runtime.png"), width=1280)
        run = service.run_for(PALINDROME)
        assert {"tok-accepted", "tok-bonus"} <= set(state["kinds"]), state["kinds"]
        _kinds_agree(state, run)
        _assert_shows(d, run["text"])
        plots = d.execute_script(
            "return [...document.querySelectorAll('.spec-plot .js-plotly-plot')].map(p => (p.data || []).length);")
        assert len(plots) == 5 and all(n >= 1 for n in plots), plots
        ledger = d.execute_script("return document.querySelector('#spec-ledger').innerText")
        assert "target forward passes" in ledger
        assert "p(" in _inspect(d, "#spec-chat .tok-accepted")
    finally:
        demo.close()


def test_a_losing_drafter_never_reads_above_one_x_between_faster_target_only_replies(browser):
    """Replies interleaved on one page: target-only, the sibling, target-only, the sibling,
    target-only, on llama.cpp with the target's own weights as the sibling (c ≈ 1: a draft step
    costs a target step, so γ·c + ρ(γ + 1) ≥ γ + 1 ≥ E[N] and no γ can pay). Every sibling reply's
    speedup on the page is held back or at most 1.00× (in particular whenever the target-only
    replies on either side of it decoded faster, by the engine's tokens / decode time), and every
    target-only reply reads 1.00× ± 0.10."""
    from specchat.commands.browser import shown_speedup

    service, demo, url = _serve_llamacpp("sibling")
    topics = ["rivers", "bridges", "owls", "tea", "clocks"]
    try:
        d = browser(url)
        _set_slider(d, "max new tokens", 128)
        shown = []
        for i, topic in enumerate(topics):
            kind = "none" if i % 2 == 0 else "sibling"
            drive_app.pick_drafter(d, kind, 120)
            message = f"Write a short paragraph about {topic}."
            drive_app.send(d, message)
            _wait_for(lambda m=message: any(r["message"] == m and r["end"] for r in service.runs), 240, message)
            drive_app.wait_done(d, 60)
            run = service.run_for(message)
            assert run["drafter"] == kind
            shown.append((kind, run["tokens"] / run["decode_ms"] * 1000, shown_speedup(d.execute_script(drive_app.PAGE_STATE)["stats"])))
        drive_app.screenshot(d, str(OUT / "losing_drafter_interleaved.png"), width=1280)
    finally:
        demo.close()
    assert all(value is None or value <= 1.0 for kind, _, value in shown if kind == "sibling"), shown
    assert all(value is not None and abs(value - 1.0) <= 0.10 for kind, _, value in shown if kind == "none"), shown


def _greedy(max_new_tokens: int):
    from specchat.core.config import GenerationConfig

    return GenerationConfig(max_new_tokens=max_new_tokens)


@pytest.fixture(scope="module", autouse=True)
def _threads():
    """The server's handler threads and the test share 2 cores: keep torch on one thread."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_trace_file_opens_with_no_model_and_shows_every_view(engine, other, browser, tmp_path):
    """``app.py --trace FILE``: a reply recorded by the engine (tiny models, T = 0.9) opens in a
    page with no model loaded; its tokens show the live reply's kinds and text, a click opens the
    inspector, the timeline has one row per round, and sending a message says there is no model."""
    from lossless import TINY_PROMPT, TINY_VOCAB

    from specchat.core.config import GenerationConfig
    from specchat.drafters.model import ModelDrafter
    from specchat.ui.session.chat import Reply, ReplySettings

    drafter = ModelDrafter(TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=257, name="other")
    config = GenerationConfig(num_speculative_tokens=4, temperature=0.9, max_new_tokens=40, seed=5, trace=True)
    live = Reply(1, "recorded", ReplySettings("other", 4, False, 0.9, 1.0, 40), config=config)
    for event in engine.generate(TINY_PROMPT, drafter, config):
        live.add(event)
    path = tmp_path / "recorded.jsonl"
    from specchat.analysis.trace import write_trace

    write_trace(path, live.trace_lines("tiny"))
    demo = app.build_ui(app.TraceOnlyService("tiny"), default_drafter="none", trace_files=(str(path),))
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, ssr_mode=False,
                            share=False, css=app.CSS, head=app.CLICK_JS,
                            app_kwargs=app.live_app_kwargs())
    try:
        d = browser(url)
        _wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#spec-chat .tok"), 30, "the replayed tokens")
        shown = d.execute_script(
            "return [...document.querySelectorAll('#spec-chat .tok')].map(e => [...e.classList].filter(c => "
            "c.startsWith('tref-') || (c.startsWith('tok-') && c !== 'tok-ws')));"
        )
        kinds = {f"tref-1-{i}": f"tok-{'target' if t.num_drafted == 0 else t.kind.value}"
                 for i, t in enumerate(live.rounds.tokens)}
        assert shown and all(kinds[ref] == kind for kind, ref in (sorted(c, key=lambda x: x.startswith("tref")) for c in shown))
        _assert_shows(d, live.renderer.text)
        assert "replayed from recorded.jsonl" in d.find_element(By.CSS_SELECTOR, "#spec-chat").text
        text = _inspect(d, "#spec-chat .tok", 1)
        assert "reply #1 · round" in text
        assert len(d.find_elements(By.CSS_SELECTOR, "#spec-timeline [class*=rref-]")) == len(live.rounds.rounds)
        drive_app.screenshot(d, str(OUT / "trace_replay.png"), width=1280)
        drive_app.send(d, "hello")
        _wait_for(lambda: "no model is loaded" in d.find_element(By.TAG_NAME, "body").text, 30, "the no-model message")
    finally:
        demo.close()
