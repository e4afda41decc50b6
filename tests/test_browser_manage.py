"""End to end, as a user: Regenerate, Continue, Edit and Export on the page, the settings and the
chat's marks kept across a reload, several chats (New, switch, Rename, Delete, Undo). The real app on SmolLM2 (tests/test_browser.py's
server), greedy; each reply checked against what the service ran (its message, the history and
the reply it continued)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import pytest
from selenium.webdriver.common.keys import Keys
from test_browser import (  # noqa: F401 (fixtures)
    BUBBLE_TOKENS,
    USER_TEXTS,
    _ended,
    _set_slider,
    _wait_for,
    browser,
    drive_app,
    served,
)

from specchat.core.events import StopReason
from specchat.ui.session.last_reply import REGENERATED_NOTE

pytestmark = [pytest.mark.real_model, pytest.mark.browser]

SLIDER_VALUE = """const lab = [...document.querySelectorAll('label, span')].find(e => e.textContent.trim().startsWith(arguments[0]));
return lab.closest('.block').querySelector('input[type=number]').value;"""
DRAFTER = "return document.querySelector('#spec-drafter input').value"
FILES = "return [...document.querySelectorAll('#spec-export-file a')].map(a => a.href);"
EXPORT_SHOWN = "const f = document.getElementById('spec-export-file'); return !!(f && f.offsetParent);"


def _ready(d):
    _wait_for(lambda: "ready" in d.execute_script(drive_app.PAGE_STATE)["status"], 60, "page ready")


def _click(d, elem_id: str) -> None:
    d.find_element("css selector", f"#{elem_id}").click()


def test_regenerate_continue_edit_and_export_as_a_user(served, browser):  # noqa: F811 (the fixtures)
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 24)
    drive_app.pick_drafter(d, "none", 0)
    _wait_for(lambda: "'none' ready" in d.find_element("css selector", "#spec-drafter-status").text, 60, "drafter none")
    message, before = "Count from 1 to 40, separated by commas.", len(service.runs)
    drive_app.send(d, message)
    first = _wait_for(lambda: _ended(service, message, before), 120, "the first reply")
    drive_app.wait_done(d, 30)
    assert first["stop"] is StopReason.MAX_NEW_TOKENS and first["drafter"] == "none"

    # Regenerate: the same message again, the old reply kept on the page and marked
    count = len(service.runs)
    _click(d, "spec-regenerate")
    _wait_for(lambda: len(service.runs) > count and service.runs[-1]["end"] is not None, 120, "the regenerated reply")
    drive_app.wait_done(d, 30)
    second = service.runs[-1]
    assert second["message"] == message and second["history"] == [] and second["continue_from"] is None
    assert second["text"] == first["text"]  # greedy: the same text
    assert d.execute_script(USER_TEXTS)[0].endswith(REGENERATED_NOTE)

    # Continue: the reply written on from its end; the model sees no end of turn in between
    count = len(service.runs)
    _click(d, "spec-continue")
    _wait_for(lambda: len(service.runs) > count and service.runs[-1]["end"] is not None, 120, "the continuation")
    drive_app.wait_done(d, 30)
    third = service.runs[-1]
    assert third["continue_from"] == second["text"] and third["history"] == [] and third["message"] == message
    assert d.execute_script(BUBBLE_TOKENS)[-1] == third["text"] and "Continue" in d.execute_script(USER_TEXTS)[-1]

    # the next message: the model sees the continued reply as one
    follow, before = "Thanks.", len(service.runs)
    drive_app.send(d, follow)
    fourth = _wait_for(lambda: _ended(service, follow, before), 120, "the next reply")
    drive_app.wait_done(d, 30)
    assert fourth["history"] == [{"role": "user", "content": message},
                                 {"role": "assistant", "content": second["text"] + third["text"]}]

    # Export: a Markdown and a JSON file with every exchange
    # Export pressed with its button at the window's bottom edge (the files appear below it)
    d.execute_script("const b = document.getElementById('spec-export'); b.scrollIntoView({block: 'end'}); b.click();")
    links = _wait_for(lambda: d.execute_script(FILES), 20, "the exported files")
    assert d.execute_script(EXPORT_SHOWN)
    # scrolled into view: the files are below the chat's buttons, often under the window's edge
    in_view = "const r = document.getElementById('spec-export-file').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight;"
    _wait_for(lambda: d.execute_script(in_view), 5, "the exported files in view")
    data = json.loads(urllib.request.urlopen(next(h for h in links if h.endswith(".json")), timeout=10).read())
    assert [e["message"] for e in data["exchanges"]] == [message, message, message, follow]
    assert [e["kept"] for e in data["exchanges"]] == [False, False, True, True]
    assert data["exchanges"][2]["continues"] and data["exchanges"][2]["reply"]["text"] == third["text"]
    assert data["exchanges"][0]["reply"]["figures"]["num_tokens"] == first["tokens"]
    markdown = urllib.request.urlopen(next(h for h in links if h.endswith(".md")), timeout=10).read().decode()
    assert urllib.parse.unquote(markdown).count("## You") == 3 and second["text"] in markdown

    # Edit: the last message in the box; its exchange stays, marked, until the edited message is sent
    _click(d, "spec-edit")
    _wait_for(lambda: d.find_element("css selector", "#spec-input textarea").get_attribute("value") == follow, 10,
              "the last message in the box")
    marked = "return [...document.querySelectorAll('#spec-chat .spec-ex.spec-editing [data-testid=user]')].map(e => e.dataset.text);"
    assert len(d.execute_script(USER_TEXTS)) == 4 and d.execute_script(marked) == [follow]
    # with the caret in the box, at its end: ready to edit
    caret = "const a = document.activeElement; return [a.closest('#spec-input') !== null, a.selectionStart, a.value.length];"
    _wait_for(lambda: (c := d.execute_script(caret))[0] and c[1] == c[2], 5, "the caret in the box")
    # sent at once, edited: it replaces the exchange (the one taken back was once drawn again beside
    # it when sent within 5 s of the reply before)
    edited, before = follow + " Really.", len(service.runs)
    d.find_element("css selector", "#spec-input textarea").send_keys(" Really.", Keys.ENTER)
    run = _wait_for(lambda: _ended(service, edited, before), 120, "the edited message's reply")
    assert follow not in [m["content"] for m in run["history"]]  # the model no longer sees the message edited
    drive_app.wait_done(d, 30)
    time.sleep(1)
    users = d.execute_script(USER_TEXTS)
    assert len(users) == 4 and users[-1] == edited and follow not in users, users
    # the exported files were of the chat before: no longer offered once a message is sent
    _wait_for(lambda: not d.execute_script(EXPORT_SHOWN), 10, "the stale export hidden")

    # a reload keeps the settings (drafter none, 24 tokens) and the chat with its marks
    time.sleep(2)  # the browser's copies are written as each event ends
    d.refresh()
    _ready(d)
    _wait_for(lambda: len(d.execute_script(USER_TEXTS)) == 4, 20, "the chat restored")
    assert d.execute_script(USER_TEXTS)[0].endswith(REGENERATED_NOTE)
    _wait_for(lambda: d.execute_script(SLIDER_VALUE, "max new tokens") == "24", 20, "max new tokens restored")
    _wait_for(lambda: d.execute_script(DRAFTER) == "none", 30, "the drafter restored")
    drive_app.screenshot(d, "test-output/browser/last-reply.png", width=1280)


def test_a_reload_mid_reply_keeps_what_streamed_and_continue_writes_it_on(served, browser):  # noqa: F811 (the fixtures)
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 600)
    drive_app.pick_drafter(d, "ngram", 0)
    message, before = "Write a very long story about a lighthouse keeper.", len(service.runs)
    drive_app.send(d, message)
    _wait_for(lambda: len(service.runs) > before and service.runs[-1]["tokens"] >= 5, 60, "tokens to stream")
    time.sleep(7)  # the browser's copy is rewritten every 5 s while the reply streams
    d.refresh()
    _ready(d)
    _wait_for(lambda: d.execute_script(USER_TEXTS), 20, "the chat restored")
    restored = d.execute_script(BUBBLE_TOKENS)[-1]
    assert restored and "reloaded while this reply was being written" in d.execute_script(USER_TEXTS)[-1]
    _wait_for(lambda: service.runs[-1]["end"] is not None, 30, "the server to stop the old reply")
    assert service.runs[-1]["text"].startswith(restored)  # what the engine wrote, up to the last copy
    count = len(service.runs)
    _click(d, "spec-continue")
    _wait_for(lambda: len(service.runs) > count, 60, "the continuation to start")
    assert service.runs[-1]["continue_from"] == restored and service.runs[-1]["message"] == message
    drive_app.button(d, "Stop").click()


CHATS = "return [...document.querySelectorAll('#spec-chats label')].map(l => [l.innerText.trim(), l.querySelector('input').checked]);"


def _chat_titles(d) -> list[str]:
    return [t for t, _ in d.execute_script(CHATS)]


def test_several_chats_switch_rename_delete_and_undo_and_survive_a_reload(served, browser):  # noqa: F811 (the fixtures)
    url, service = served
    d = browser(url)
    _set_slider(d, "max new tokens", 16)
    before = len(service.runs)
    drive_app.send(d, "Name a colour.")
    _wait_for(lambda: _ended(service, "Name a colour.", before), 120, "the first chat's reply")
    drive_app.wait_done(d, 30)
    _wait_for(lambda: "Name a colour." in _chat_titles(d), 10, "the chat titled by its first message")
    _click(d, "spec-new-chat")
    _wait_for(lambda: d.execute_script(USER_TEXTS) == [], 10, "an empty chat")
    before = len(service.runs)
    drive_app.send(d, "Name a fruit.")
    fruit = _wait_for(lambda: _ended(service, "Name a fruit.", before), 120, "the second chat's reply")
    drive_app.wait_done(d, 30)
    assert fruit["history"] == []  # a new chat: the model sees nothing of the first
    box = d.find_element("css selector", "#spec-rename input, #spec-rename textarea")
    box.send_keys("Fruit talk\n")
    _wait_for(lambda: "Fruit talk" in _chat_titles(d), 10, "the rename")
    # switch back: the first chat, and the model sees its history
    next(e for e in d.find_elements("css selector", "#spec-chats label") if "Name a colour." in e.text).click()
    _wait_for(lambda: d.execute_script(USER_TEXTS) == ["Name a colour."], 10, "the first chat shown")
    before = len(service.runs)
    drive_app.send(d, "Another?")
    another = _wait_for(lambda: _ended(service, "Another?", before), 120, "the reply in the first chat")
    drive_app.wait_done(d, 30)
    assert [m["content"] for m in another["history"]][0] == "Name a colour."
    # a reload keeps both chats and the active one
    time.sleep(2)
    d.refresh()
    _ready(d)
    _wait_for(lambda: sorted(_chat_titles(d)) == ["Fruit talk", "Name a colour."], 20, "the list restored")
    _wait_for(lambda: d.execute_script(USER_TEXTS) == ["Name a colour.", "Another?"], 20, "the active chat restored")
    # Delete, then Undo
    _click(d, "spec-delete-chat")
    _wait_for(lambda: _chat_titles(d) == ["Fruit talk"], 10, "the chat deleted")
    assert d.execute_script(USER_TEXTS) == ["Name a fruit."]
    _click(d, "spec-undo")
    _wait_for(lambda: sorted(_chat_titles(d)) == ["Fruit talk", "Name a colour."], 10, "the chat back")
    assert d.execute_script(USER_TEXTS) == ["Name a colour.", "Another?"]
    drive_app.screenshot(d, "test-output/browser/chats.png", width=1280)


MODEL_INPUT = "#spec-model input"


def _pick_model(d, text: str) -> None:
    """Type ``text`` into the model menu; pick the option that reads exactly so (else the typed text)."""
    box = d.find_element("css selector", MODEL_INPUT)
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(text)
    time.sleep(0.5)
    option = next((o for o in d.find_elements("css selector", "[role=option]") if o.text.strip().split()[-1] == text), None)
    if option is not None:
        option.click()
    else:
        box.send_keys(Keys.ENTER)
    time.sleep(0.5)
    _click(d, "spec-load-model")


def test_the_model_menu_loads_another_target_and_refuses_a_path_that_is_not_a_model(served, browser, tmp_path):  # noqa: F811
    """Last in this module: it changes the served target (and puts it back)."""
    url, service = served
    original = service.target_name
    target_dir = str(service.target_path)
    d = browser(url)
    _pick_model(d, str(tmp_path / "nothing.gguf"))
    _wait_for(lambda: "Cannot load" in d.page_source, 20, "the refusal")
    assert service.target_name == original and not service.loading
    try:
        _pick_model(d, "smollm2-135m-instruct")
        _wait_for(lambda: service.target_name == "smollm2-135m-instruct", 20, "the switch to start")
        # the status says "ready" before the switch too (the old target's drafter) and nothing loads
        # while the new target is read: the pick's own words say the switch is through
        status = lambda: d.find_element("css selector", "#spec-drafter-status").text  # noqa: E731
        _wait_for(lambda: "ready" in (t := status()) and "picked by measurement:" in t and not service.loading,
                  300, "the new target loaded and its drafter picked")
        assert service.startup_error is None and service.picked is not None
        assert "smollm2-135m-instruct" in d.find_element("css selector", ".spec-subtitle").text
        # the menu shows the pick's label: its name, then its cost here once the calibration timed it
        assert d.execute_script(DRAFTER).split()[0] == service.picked.drafter
        _set_slider(d, "max new tokens", 16)
        before = len(service.runs)
        drive_app.send(d, "Say hi.")
        run = _wait_for(lambda: _ended(service, "Say hi.", before), 120, "a reply from the new target")
        assert run["tokens"] > 0 and run["drafter"] == service.picked.drafter
    finally:
        service.retarget(target_dir)
        service.start("ngram").join()
        assert service.startup_error is None
    assert original  # the served fixture's target is back (a directory: named after it)
