"""A streaming reply's live channel (specchat.ui.session.live) and its route (specchat.ui.page.live):
the latest value only, the fallback to Gradio while no page reads, the route's events, and the page
handler that sends a reply's text there."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from specchat.ui.page import live as route
from specchat.ui.session import live
from specchat.ui.session.live import LIVE, LiveChannel, LiveChannels


def test_a_channel_folds_what_its_reader_has_not_taken_and_wakes_it():
    channel = LiveChannel()
    assert channel.path == "specchat/live/" + channel.key and len(channel.key) >= 20
    assert channel.wait(0, 0.01) == (0, None, False)  # nothing yet: the wait times out
    channel.publish({"seq": 1, "reset": False, "items": {"2": {"id": 2, "user": "queued"}}})  # shown once
    channel.publish({"seq": 2, "reset": False, "items": {"1": {"id": 1, "reply": "é…"}}})
    channel.publish({"seq": 3, "reset": False, "items": {"1": {"id": 1, "reply": "é!"}}})
    version, payload, closed = channel.wait(0, 0.01)
    # one value: the latest seq, the queued message of the first value and the reply's latest state
    assert (version, closed) == (3, False)
    assert json.loads(payload) == {"seq": 3, "reset": False, "items": {"2": {"id": 2, "user": "queued"},
                                                                      "1": {"id": 1, "reply": "é!"}}}
    assert channel.wait(3, 0.01) == (3, None, False)  # nothing newer than version 3
    channel.publish({"seq": 4, "reset": False, "items": {"1": {"id": 1, "reply": "é!?"}}})
    assert json.loads(channel.wait(3, 0.01)[1])["items"] == {"1": {"id": 1, "reply": "é!?"}}  # taken: not folded again
    got = []
    reader = threading.Thread(target=lambda: got.append(channel.wait(4, 5.0)))
    reader.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    channel.close()
    reader.join()
    assert got == [(4, None, True)] and time.perf_counter() - t0 < 1.0  # woken by the close, not the timeout


def test_a_reset_folds_as_a_reset():
    older = {"seq": 5, "epoch": "e", "reset": True, "items": {"1": {"id": 1}}}
    newer = {"seq": 6, "epoch": "e", "reset": False, "items": {"2": {"id": 2}}}
    # the page empties the transcript, then shows both exchanges
    assert live.fold(older, newer) == {"seq": 6, "epoch": "e", "reset": True, "items": {"1": {"id": 1}, "2": {"id": 2}}}
    assert live.fold(newer, older) == older  # a later reset drops what came before it


def test_a_fold_keeps_the_latest_stats_line():
    older = {"seq": 5, "epoch": "e", "reset": False, "items": {}, "stats": "<div>old</div>"}
    assert live.fold(older, {"seq": 6, "epoch": "e", "items": {}})["stats"] == "<div>old</div>"  # none newer: kept
    assert live.fold(older, {"seq": 6, "epoch": "e", "items": {}, "stats": "<div>new</div>"})["stats"] == "<div>new</div>"


def test_an_update_goes_through_gradio_until_a_page_reads_the_channel():
    channel = LiveChannel()
    value = {"seq": 3, "items": []}
    assert channel.offer(value) == {"seq": 3, "items": [], "live": channel.path}  # the page is told where to read
    assert channel.wait(0, 0.01)[1] is None  # and nothing was published
    channel.attach()
    assert channel.readers == 1
    assert channel.offer(value) is None  # a page reads: Gradio sends nothing
    assert json.loads(channel.wait(0, 0.01)[1]) == value
    channel.detach()
    channel.detach()  # a second goodbye does not go below zero
    assert channel.readers == 0 and channel.offer(value) == {**value, "live": channel.path}


def test_channels_are_found_by_key_while_open_only():
    channels = LiveChannels()
    with channels.channel() as channel:
        assert channels.get(channel.key) is channel and channels.get("nope") is None
    assert channels.get(channel.key) is None and channel.wait(0, 0.01)[2]  # closed on leaving


def test_the_route_streams_the_latest_value_then_the_end_and_refuses_unknown_keys():
    client = TestClient(FastAPI(**route.app_kwargs()))
    assert client.get("/specchat/live/unknown").status_code == 404
    with LIVE.channel() as channel:
        channel.publish({"seq": 7, "items": {"1": {"id": 1}}})
        threading.Timer(0.3, channel.close).start()
        with client.stream("GET", "/" + channel.path) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            body = "".join(response.iter_text())
    assert body == 'data: {"seq":7,"items":{"1":{"id":1}}}\n\nevent: end\ndata: \n\n'
    assert channel.readers == 0  # the reader detached when its stream ended


def test_a_reader_that_goes_away_stops_counting_at_once():
    """The page's updates go back to Gradio when its reader leaves mid-reply, not when the reply ends."""
    client = TestClient(FastAPI(**route.app_kwargs()))
    with LIVE.channel() as channel:
        channel.publish({"seq": 1, "items": {}})
        with client.stream("GET", "/" + channel.path) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            assert channel.readers == 1
        deadline = time.monotonic() + 2 * route.POLL_S + 1.0
        while channel.readers and time.monotonic() < deadline:
            time.sleep(0.02)
        assert channel.readers == 0
        assert channel.offer({"seq": 2, "items": {}}) == {"seq": 2, "items": {}, "live": channel.path}


def test_each_launch_gets_its_own_app_kwargs():
    first, second = route.app_kwargs(), route.app_kwargs()
    first["lifespan"] = object()  # Gradio writes into the dict it is given
    assert "lifespan" not in second and [r.path for r in second["routes"]] == ["/specchat/live/{key}"]


@pytest.fixture
def handlers():
    """The page's handlers on the scripted fake service (tests/test_app.py)."""
    from test_app import FakeService

    from specchat.ui.page import app

    demo = app.build_ui(FakeService())
    fn = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "respond_on_page")
    return fn.__self__


def _reply(handlers, monkeypatch, *, reading: bool):
    """One reply through the page's handler; (Gradio's transcript values, the channel's published values)."""
    published: list[dict] = []
    opened = LiveChannels()

    @contextlib.contextmanager
    def channel():
        with opened.channel() as c:
            if reading:
                c.attach()
            publish = c.publish
            c.publish = lambda value: (published.append(value), publish(value))[1]
            yield c

    monkeypatch.setattr(live.LIVE, "channel", channel)
    session = handlers.sessions.get("live-test")
    session.text_interval_s = session.stats_interval_s = 0.0  # every round is an update, with the stats line
    request = type("R", (), {"session_hash": "live-test"})()
    outs = list(handlers.respond_on_page("hello", "hybrid", 4, 0.0, 1.0, 64, False, "", None, request=request))
    sent = [o[handlers.page.transcript] for o in outs if handlers.page.transcript in o]
    stats = [o[handlers.page.stats] for o in outs if isinstance(o.get(handlers.page.stats), str)]
    return sent, published, stats


def _texts(values: list[dict]) -> list[str]:
    return [item["reply"].get("text") for v in values for item in v["items"].values() if item.get("reply")]


def test_while_a_page_reads_the_channel_the_reply_streams_there_and_gradio_sends_its_start_and_end(handlers, monkeypatch):
    from test_app import REPLY_TEXT, SCRIPT

    sent, published, stats = _reply(handlers, monkeypatch, reading=True)
    assert len(published) >= len(SCRIPT) - 1  # a value per round (the first rounds may fold into one)
    # the stats line rode with each live value; Gradio sent it at the reply's start and end only
    assert all(v["stats"].startswith('<div class="spec-stats">') for v in published)
    assert "generating" in stats[0] and "generating" not in stats[-1] and len(stats) <= 3
    assert all(v.get("live") is None for v in sent)  # Gradio never sent a streaming update
    assert len(sent) <= 3  # the message shown, the reply's end (and its last view)
    assert _texts(sent)[-1] == REPLY_TEXT  # the end comes through Gradio, with the whole reply
    seqs = [v["seq"] for v in published]
    assert seqs == sorted(seqs) and max(seqs) < sent[-1]["seq"]  # Gradio's end is newer than every live value
    assert {v["epoch"] for v in published + sent} == {sent[-1]["epoch"]}


def test_while_no_page_reads_it_every_update_goes_through_gradio_saying_where_to_read(handlers, monkeypatch):
    from test_app import REPLY_TEXT, SCRIPT

    sent, published, stats = _reply(handlers, monkeypatch, reading=False)
    assert published == [] and all(isinstance(v["stats"], str) for v in sent if "live" in v)
    streaming = [v for v in sent if "live" in v]
    assert len(streaming) >= len(SCRIPT) - 1 and len({v["live"] for v in streaming}) == 1
    assert streaming[0]["live"].startswith("specchat/live/")
    assert _texts(sent)[-1] == REPLY_TEXT and "live" not in sent[-1]  # the end does not ask to read
