"""The chat as people keep using it, in headless Chromium on the real app (SmolLM2-135M): where the
transcript scrolls while a reply streams, the keyboard, the light / dark switch.

Positions are measured in the page: the transcript is its own scroller (``.spec-transcript``), so
"at the bottom" is its scrollHeight − scrollTop − clientHeight. A sampler in the page records it
every 100 ms while a reply streams (several moments, not one). Screenshots go to
``test-output/browser/``. Served, skipped and required exactly as tests/test_browser.py (whose
fixtures these tests share).
"""

from __future__ import annotations

import time

import pytest
import test_browser as tb  # first: it skips (or fails) the module when the browser is missing

# isort: split
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from specchat.core.events import StopReason

pytestmark = [pytest.mark.real_model, pytest.mark.browser]

# test_browser's fixtures and helpers: the app on SmolLM2 (one per module), the pages, torch on one thread
served, browser, _threads = tb.served, tb.browser, tb._threads
OUT, USER_TEXTS, drive_app, _set_slider, _wait_for = tb.OUT, tb.USER_TEXTS, tb.drive_app, tb._set_slider, tb._wait_for

STORY = "Write a long story about a lighthouse keeper and a storm, in ten paragraphs."
NEAR_PX = 4  # "at the bottom": within this many px

# Every 100 ms: the transcript's scroll position, whether the last user message is in view, the
# jump button, the number of messages and whether a reply streams. Reading the position lays the
# page out at once, between frames: right after a window resize it can see the text reflowed
# before the ResizeObserver that keeps the view at the bottom has run (it runs before the frame is
# painted). So a sample away from the bottom is measured again two frames later (``gap_next``):
# what the reader sees is away only if it still is.
SAMPLER = """
const r = document.querySelector('#spec-chat .spec-transcript');
const measure = () => {
  const users = r.querySelectorAll('[data-testid=user]'), u = users[users.length - 1];
  const box = r.getBoundingClientRect(), ub = u && u.getBoundingClientRect();
  const jump = document.querySelector('#spec-chat .spec-jump');
  return {t: performance.now(), top: r.scrollTop, height: r.scrollHeight, gap: r.scrollHeight - r.scrollTop - r.clientHeight,
    users: users.length, running: !!r.querySelector('.spec-running'),
    user_in_view: !!ub && ub.top >= box.top - 1 && ub.bottom <= box.bottom + 1,
    jump: !!jump && !jump.hidden && jump.offsetParent !== null};
};
window.__samples = [];
clearInterval(window.__sampler);
window.__sampler = setInterval(() => {
  const s = measure();
  window.__samples.push(s);
  if (s.gap > 4) requestAnimationFrame(() => requestAnimationFrame(() => { s.gap_next = measure().gap; }));
}, 100);
"""
STREAMING = """const r = document.querySelector('#spec-chat .spec-transcript');
return r.querySelector('.spec-running .tok') ? r.querySelectorAll('[data-testid=user]').length : 0;"""
# the samples taken so far, but the last 150 ms (whose second look may still be to come)
SAMPLES = """const cut = performance.now() - 150, all = window.__samples;
window.__samples = all.filter(s => s.t >= cut);
return all.filter(s => s.t < cut);"""
POSITION = """const r = document.querySelector('#spec-chat .spec-transcript');
return {top: r.scrollTop, height: r.scrollHeight, gap: r.scrollHeight - r.scrollTop - r.clientHeight};"""


def _samples(d, seconds: float) -> list[dict]:
    time.sleep(seconds)
    return d.execute_script(SAMPLES)


def _growing(d, seconds: float) -> list[dict]:
    """Samples for ``seconds``, and on (up to 15 s in all) until the streaming reply has grown at
    three moments: a busy machine's browser can stall for seconds (CI saw a 4 s window in which
    the page drew nothing, right after a full-page screenshot)."""
    samples, start = _samples(d, seconds), time.time()
    while len({s["height"] for s in samples if s["running"]}) < 3 and time.time() - start < 15 - seconds:
        samples += _samples(d, 1)
    return samples


def _transcript(d):
    return d.find_element(By.CSS_SELECTOR, "#spec-chat .spec-transcript")


def _wheel_up(d, pixels: int) -> None:
    """Scroll the transcript up as a person does: real wheel events over it."""
    ActionChains(d).scroll_from_origin(ScrollOrigin.from_element(_transcript(d)), 0, -pixels).perform()
    time.sleep(0.6)  # the smooth scroll settles


def _following(samples: list[dict]) -> None:
    """Every sample is at the bottom, and the reply grew while they were taken."""
    assert samples, "no samples"
    assert len({s["height"] for s in samples}) >= 3, samples  # the reply grew: several moments
    away = [s for s in samples if s["gap"] > NEAR_PX and s.get("gap_next", NEAR_PX + 1) > NEAR_PX]
    assert not away, f"{len(away)} of {len(samples)} samples away from the bottom: {away[:5]}"


def _send_and_finish(d, message: str) -> None:
    drive_app.send(d, message)
    drive_app.wait_done(d, 240)


def _set_colours(d, mode: str) -> None:
    """Click "colours" or "plain" (a real click on the radio's label)."""
    label = d.execute_script(
        "return [...document.querySelectorAll('#spec-colours label')].find(l => l.innerText.trim() === arguments[0]);", mode)
    label.click()
    _wait_for(lambda: d.execute_script(
        "return document.querySelector('#spec-chat .spec-transcript').classList.contains('spec-plain')") == (mode == "plain"),
        5, f"'{mode}'")


def _toggle_rejected(d) -> None:
    """Click "show rejected drafts" (a real click on its checkbox)."""
    box = d.execute_script("""return [...document.querySelectorAll('label')].find(l => l.innerText.includes('show rejected drafts'))
                              .querySelector('input[type=checkbox]');""")
    shown = box.is_selected()
    box.click()
    _wait_for(lambda: d.execute_script(
        "return document.querySelector('#spec-chat .spec-transcript').classList.contains('spec-show-rejected')") != shown,
        5, "the rejected drafts to switch")


def test_the_view_follows_a_reply_stops_where_the_reader_scrolls_and_jumps_back(served, browser, monkeypatch):
    """After Send, the message and the reply growing under it are in view; scrolled up, the view
    stays put and offers "jump to the latest", which goes back and follows again; a resize of the
    window keeps a following view at the bottom."""
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 256)
    _send_and_finish(d, STORY)  # a reply taller than the transcript: the case that jumped
    d.execute_script(SAMPLER)
    _set_slider(d, "max new tokens", 2048)
    # still streaming through the ≤ 50 s this test watches it, on any machine: 2048 tokens at most
    # ~33 a second (paced per token: n-gram drafts write a repeating story 7 tokens a round, and
    # CI's machine wrote all 1024 with a pause per round before the test's last look)
    monkeypatch.setattr(service, "token_delay_s", 0.03)
    drive_app.send(d, "Write a long story about a sailor who finds a map, in ten paragraphs.")
    _wait_for(lambda: d.execute_script(STREAMING) == 2, 60, "the reply to stream")
    samples = [s for s in _growing(d, 6) if s["users"] == 2]
    assert samples and samples[0]["user_in_view"], samples[:3]  # the message just sent is in view
    _following([s for s in samples if s["running"]])
    d.set_window_size(1000, 820)  # a resize does not move a following view off the bottom
    _following([s for s in _growing(d, 4) if s["running"]])

    _wheel_up(d, 300)  # the reader scrolls up mid-stream: the view stays where they put it
    held = d.execute_script(POSITION)
    assert held["gap"] > 200, held
    d.execute_script(SAMPLES)
    samples = _samples(d, 5)
    assert service.runs[-1]["end"] is None  # still streaming
    assert len({s["height"] for s in samples}) >= 3, [(s["top"], s["height"]) for s in samples]
    assert all(abs(s["top"] - held["top"]) <= NEAR_PX and s["jump"] for s in samples), (held, samples)
    drive_app.screenshot(d, str(OUT / "chat_ux_scrolled_up.png"), width=1000)
    d.set_window_size(1000, 820)
    d.find_element(By.CSS_SELECTOR, "#spec-chat .spec-jump").click()  # back to the latest, and it follows again
    _samples(d, 0.5)  # (those taken before the click)
    samples = _growing(d, 4)
    assert not any(s["jump"] for s in samples), samples
    _following([s for s in samples if s["running"]])
    drive_app.button(d, "Stop").click()
    drive_app.wait_done(d, 30)


def test_panels_and_switches_do_not_move_the_view(served, browser):
    """"show rejected drafts", "colours / plain" and the 3 s panel tick leave the transcript's view
    where it is: at the bottom when it follows, at the same scrollTop when the reader scrolled up."""
    url, service = served
    d = browser(url)
    d.set_window_size(1280, 2400)  # the charts on screen: the panel tick redraws them while a reply streams
    _set_slider(d, "max new tokens", 256)
    drive_app.set_checkbox(d, "adaptive γ", False)  # fixed γ: drafts, and rejected ones to show
    _send_and_finish(d, STORY)
    _send_and_finish(d, "Now tell the same story from the storm's point of view.")
    assert d.execute_script(POSITION)["gap"] <= NEAR_PX
    rejected = d.execute_script("return document.querySelectorAll('#spec-chat .spec-rejected-run').length")
    assert rejected > 0  # something for the switch to show
    # following: the switches keep it at the bottom
    for switch in (_toggle_rejected, lambda d: _set_colours(d, "plain"), lambda d: _set_colours(d, "colours"),
                   _toggle_rejected):
        switch(d)
        time.sleep(0.5)
        assert d.execute_script(POSITION)["gap"] <= NEAR_PX
    # scrolled up: the switches leave scrollTop as it is
    _wheel_up(d, 400)
    held = d.execute_script(POSITION)
    assert held["gap"] > 300, held
    for switch in (lambda d: _set_colours(d, "plain"), lambda d: _set_colours(d, "colours"), _toggle_rejected,
                   _toggle_rejected):
        switch(d)
        time.sleep(0.5)
        assert abs(d.execute_script(POSITION)["top"] - held["top"]) <= NEAR_PX
    # while a reply streams with the panels on screen (the tick redraws them every 3 s), a view
    # scrolled up stays put
    d.execute_script(SAMPLER)
    _set_slider(d, "max new tokens", 1024)
    drive_app.send(d, "Write a long poem about the sea, in twenty verses.")
    time.sleep(3)  # the Send brought the view down; the reply streams
    _wheel_up(d, 250)
    held = d.execute_script(POSITION)
    d.execute_script(SAMPLES)
    samples = _samples(d, 7)  # two panel ticks
    assert len({s["height"] for s in samples}) >= 3, samples
    assert all(abs(s["top"] - held["top"]) <= NEAR_PX for s in samples), (held, samples)
    drive_app.button(d, "Stop").click()
    drive_app.wait_done(d, 30)


REPLY_STATUS = """const b = document.querySelectorAll('#spec-chat [data-testid=bot]');
return b.length ? b[b.length - 1].querySelector('.spec-status-slot').innerText : '';"""
# the messages as typed (each bubble's data-text: the bubble itself shows them as Markdown)
SENT_TEXTS = "return [...document.querySelectorAll('#spec-chat [data-testid=user]')].map(e => e.dataset.text);"
EDIT_NOTE = "const n = document.getElementById('spec-edit-note'); return n && !n.hidden ? n.textContent : '';"
EDITED_MARKS = "return document.querySelectorAll('#spec-chat .spec-ex.spec-editing').length;"
BOX_STATE = "const b = document.querySelector('#spec-input textarea'); return [b.value, b.selectionStart, b.selectionEnd];"


def test_enter_sends_shift_enter_breaks_esc_stops_and_up_edits(served, browser):
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 1024)
    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    lines = ["Write a long story about a lighthouse keeper,", "in ten paragraphs."]
    box.send_keys(lines[0], Keys.SHIFT, Keys.ENTER)
    box.send_keys(lines[1])
    assert box.get_attribute("value") == "\n".join(lines)  # Shift+Enter: a new line, nothing sent
    assert d.execute_script(USER_TEXTS) == []
    before = len(service.runs)
    box.send_keys(Keys.ENTER)  # Enter sends
    message = "\n".join(lines)
    _wait_for(lambda: d.execute_script(drive_app.PAGE_STATE)["tokens"] >= 8, 90, "tokens to stream")
    assert d.execute_script(SENT_TEXTS) == [message]
    ActionChains(d).send_keys(Keys.ESCAPE).perform()  # Esc, wherever the focus is: Stop
    run = _wait_for(lambda: len(service.runs) > before and (r := service.runs[-1])["end"] is not None and r, 30, "Esc to stop it")
    assert run["message"] == message and run["stop"] is StopReason.CANCELLED and run["tokens"] < 1024
    drive_app.wait_done(d, 30)
    assert "stopped" in d.execute_script(REPLY_STATUS)
    # ↑ in the empty box: the last message back, to edit, the caret at its end; the exchange stays, marked
    assert box.get_attribute("value") == ""
    box.click()
    box.send_keys(Keys.ARROW_UP)
    assert d.execute_script(BOX_STATE) == [message, len(message), len(message)]
    assert "Editing your last message" in d.execute_script(EDIT_NOTE) and d.execute_script(EDITED_MARKS) == 1
    drive_app.screenshot(d, "test-output/browser/editing.png", width=1280)
    box.send_keys(Keys.HOME, Keys.ARROW_UP)  # ↑ in a box with text moves the caret, nothing else
    assert box.get_attribute("value") == message
    ActionChains(d).send_keys(Keys.ESCAPE).perform()  # Esc with nothing streaming: the edit cancelled
    assert box.get_attribute("value") == "" and d.execute_script(EDITED_MARKS) == 0 and not d.execute_script(EDIT_NOTE)
    time.sleep(1)
    assert len(service.runs) == before + 1 and d.execute_script(SENT_TEXTS) == [message]
    box.send_keys(Keys.ARROW_UP)  # again, and sent edited: it replaces the exchange (and its stopped reply)
    edited = message + " Keep it short."
    box.send_keys(Keys.END, " Keep it short.", Keys.ENTER)
    _wait_for(lambda: d.execute_script(SENT_TEXTS) == [edited], 30, "the edited message in place of the first")
    _wait_for(lambda: d.execute_script(STREAMING) == 1, 90, "its reply to stream")
    assert d.execute_script(EDITED_MARKS) == 0 and not d.execute_script(EDIT_NOTE)
    box.send_keys(Keys.ESCAPE)  # Esc in the message box stops it too
    run = _wait_for(lambda: len(service.runs) > before + 1 and (r := service.runs[-1])["end"] is not None and r, 30,
                    "Esc to stop it")
    assert run["message"] == edited and run["stop"] is StopReason.CANCELLED and run["history"] == []
    drive_app.wait_done(d, 30)
    # text typed and not sent survives a reload; once sent, it is not put back
    box.send_keys("Say hi.")
    for sent in (False, True):
        d.refresh()
        _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready again")
        box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
        if sent:
            time.sleep(3)
            assert box.get_attribute("value") == ""
            break
        _wait_for(lambda b=box: b.get_attribute("value") == "Say hi.", 10, "the unsent text put back")
        box.send_keys(Keys.ENTER)
        _wait_for(lambda: "Say hi." in d.execute_script(SENT_TEXTS), 30, "the draft sent")
        drive_app.wait_done(d, 120)


THEME = """return [document.body.classList.contains('dark'), localStorage.getItem('specchat-theme'),
  (document.getElementById('spec-theme') || {}).innerText,
  getComputedStyle(document.querySelector('.gradio-container')).getPropertyValue('--body-background-fill')];"""


def test_the_theme_switch_sets_dark_and_a_reload_keeps_it(served, browser):
    url, _ = served
    d = browser(url)
    switch = d.find_element(By.ID, "spec-theme")
    dark, kept, label, light_bg = d.execute_script(THEME)
    assert (dark, kept) == (False, None) and "dark" in label  # headless Chromium's system theme: light
    drive_app.screenshot(d, str(OUT / "chat_ux_light.png"), width=1280)
    d.set_window_size(1280, 900)
    switch.click()
    dark, kept, label, dark_bg = d.execute_script(THEME)
    assert (dark, kept) == (True, "dark") and "light" in label and dark_bg != light_bg
    drive_app.screenshot(d, str(OUT / "chat_ux_dark.png"), width=1280)
    d.set_window_size(1280, 900)
    d.refresh()
    _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready")
    assert d.execute_script(THEME)[:2] == [True, "dark"]
    d.find_element(By.ID, "spec-theme").click()
    assert d.execute_script(THEME)[:2] == [False, "light"]
    d.refresh()
    _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready")
    assert d.execute_script(THEME)[:2] == [False, "light"]
