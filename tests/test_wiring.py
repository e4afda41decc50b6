"""The page's wiring as data (specchat.ui.session.view, layout.VIEW_OUTPUTS, wiring.events): the map from
View fields to components covers every field, the streaming policy derives the constants the
session and the page use, each event's outputs are the ones the policy says, and the page's
JavaScript and CSS files are what the page gets. No model, no server."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specchat.ui.html import render, transcript
from specchat.ui.html.static_files import STATIC, static_text  # noqa: E402
from specchat.ui.page import (
    handlers,
    layout,
    wiring,  # noqa: E402
)
from specchat.ui.page.host import TraceOnlyService  # noqa: E402
from specchat.ui.session import chat as session
from specchat.ui.session import view
from specchat.ui.session import views as session_views


def test_the_policy_derives_the_constants_the_session_and_the_page_use():
    assert view.STREAMED_FIELDS == ("transcript", "stats", "toasts")
    assert view.TICKED_FIELDS == ("table", "figures", "timeline", "ledger", "worth")
    assert view.LIVE_PANELS == ("charts", "timeline", "ledger")
    assert view.PANEL_FIELDS == ("figures", "timeline", "ledger", "worth")
    # one View, importable from where it was
    assert session.View is session_views.View is view.View
    assert session.STREAMED_FIELDS is view.STREAMED_FIELDS and session_views.LIVE_PANELS is view.LIVE_PANELS
    # every field but "streaming" (how a transcript is sent) has a policy, and every field but the
    # toasts and that flag a place on the page
    fields = [f.name for f in dataclasses.fields(view.View)]
    assert all(f.metadata["when"] in (view.STREAMED, view.TICKED, view.SETTLED)
               for f in dataclasses.fields(view.View) if f.name != "streaming")
    assert sorted(layout.VIEW_OUTPUTS) == sorted(set(fields) - {"toasts", "streaming"})
    assert set(layout.VIEW_VALUES) <= set(layout.VIEW_OUTPUTS)


@pytest.fixture(scope="module")
def demo():
    return wiring.build_ui(TraceOnlyService("t"), default_drafter="none")


def _outputs(demo, name: str) -> list:
    fns = [fn for fn in demo.fns.values() if fn.name == name]
    assert fns, name
    return [b.elem_id or type(b).__name__ for b in fns[0].outputs]


def test_each_event_updates_what_the_policy_says(demo):
    plots = ["plot-alpha", "plot-position", "plot-speed", "plot-theory"]
    # a reply's stream on the page: the transcript and the stats line only (the browser's copy of
    # the chat has its own tick: as a third output it slowed the page by a quarter)
    assert _outputs(demo, "respond_on_page") == ["spec-chat", "spec-stats"]
    assert _outputs(demo, "save_now") == ["BrowserState", "Timer"]
    # the panel tick: the ticked fields; the reply's end: everything the stream left aside
    assert _outputs(demo, "tick") == ["spec-table", *plots, "spec-timeline", "spec-ledger", "plot-worth"]
    aside = ["spec-input", "spec-table", *plots, "spec-inspector", "spec-timeline", "spec-race", "spec-download",
             "spec-ledger", "plot-worth"]
    assert _outputs(demo, "settle") == [*aside, "Timer", "Timer", "BrowserState", "spec-chats", "BrowserState"]
    # /chat and an opened trace: every output, textbox first (the API's order)
    everything = ["spec-input", "spec-chat", "spec-stats", "spec-table", *plots, "spec-inspector", "spec-timeline",
                  "spec-race", "spec-download", "spec-ledger", "plot-worth"]
    assert _outputs(demo, "respond") == _outputs(demo, "open_trace") == everything
    assert _outputs(demo, "set_panels") == [*plots, "spec-timeline", "spec-ledger", "plot-worth", "Timer"]
    assert _outputs(demo, "clear") == ["spec-chat", "spec-stats", "spec-table", *plots, "spec-inspector",
                                       "spec-timeline", "spec-ledger", "plot-worth", "BrowserState", "spec-undo",
                                       "spec-export-file"]  # an export of the chat cleared is hidden
    assert _outputs(demo, "restore") == ["spec-chat", "spec-stats", "spec-table", *plots, "spec-system", "BrowserState"]


def test_every_handler_is_wired_and_every_event_has_its_handler(demo):
    named = set()

    def walk(events):
        for event in events:
            if event.fn is not None:
                named.add(event.fn)
                assert callable(getattr(handlers.Handlers, event.fn)), event.fn
            walk(event.then)

    walk(wiring.events(False))
    walk(wiring.events(True))
    helpers = {"session_of", "updates", "reply_settings", "reply_views"}
    methods = {n for n, v in vars(handlers.Handlers).items()
               if not n.startswith("_") and (callable(v) or isinstance(v, staticmethod))}
    assert methods - helpers == named


def test_the_static_files_are_what_the_page_gets():
    head = ("theme.js", "click.js", "keys.js", "frames.js")
    assert layout.CLICK_JS == "".join("\n<script>\n" + static_text(n) + "</script>\n" for n in head)
    assert transcript.TRANSCRIPT_JS == "\n" + static_text("transcript.js")
    assert transcript.SET_PLAIN_JS.startswith("(mode) => {") and transcript.SET_PLAIN_JS.endswith("}")
    for name in ("page.css", "inspector.css", "ledger.css", "transcript.css"):
        assert static_text(name) in render.CSS, name
    # the struck-through rejected drafts keep the resampled kind's colour
    assert f".tok-rejected {{ text-decoration: line-through; color: {render.KIND_COLORS['resampled']};" in render.CSS
    # no file is left unused
    used = {*head, "transcript.js", "set_plain.js", "set_rejected.js", "page.css", "inspector.css",
            "ledger.css", "transcript.css"}
    assert {p.name for p in STATIC.iterdir()} == used


def test_restoring_every_kept_setting_updates_only_the_listeners_outputs(demo):
    """A browser that kept every setting (the system prompt's box too): each handler that reads
    them on load returns only components its listener lists (Gradio refuses the whole update
    otherwise, and every setting is lost: a tester saw γ, T and max tokens reset on each reload)."""
    from specchat.ui.session.saved import kept_prompt, settings_state

    kept = kept_prompt(settings_state({"drafter": "none", "gamma": 4, "temperature": 0.7, "top_p": 0.9,
                                       "max_new_tokens": 32, "adaptive": False, "colours": "plain"}), "Be brief.")
    for name in ("restore_settings", "restore"):
        block = next(fn for fn in demo.fns.values() if fn.name == name)
        request = type("R", (), {"session_hash": f"kept-{name}"})()
        out = block.fn(kept) if name == "restore_settings" else block.fn({}, kept, request=request)
        assert set(out) <= set(block.outputs), name
        if name == "restore_settings":
            assert len(out) == 6  # γ, T, top-p, max tokens, adaptive, colours (the drafter once the models are ready)
