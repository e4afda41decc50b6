"""specchat bench-page's arithmetic, checked against hand-written rows and DevTools log entries
(the browser run itself is `python -m specchat bench-page`; see the README)."""

from __future__ import annotations

import json

import pytest

from specchat.commands.bench.page import CHAT_SCRIPT, _update_sizes, format_report, read_chat, summarize


def _entry(method: str, **params) -> dict:
    return {"message": json.dumps({"message": {"method": method, "params": params}})}


def test_update_sizes_count_the_queue_and_live_streams_and_not_the_keep_alive_pings():
    entries = [
        _entry("Network.requestWillBeSent", requestId="q1", request={"url": "http://127.0.0.1:7860/gradio_api/queue/data?session_hash=x"}),
        _entry("Network.requestWillBeSent", requestId="js", request={"url": "http://127.0.0.1:7860/assets/index.js"}),
        _entry("Network.requestWillBeSent", requestId="l1", request={"url": "http://127.0.0.1:7860/specchat/live/k3y"}),
        _entry("Network.dataReceived", requestId="q1", dataLength=1632),
        _entry("Network.dataReceived", requestId="js", dataLength=90000),  # not an update
        _entry("Network.dataReceived", requestId="l1", dataLength=12964),  # a reply's live update
        _entry("Network.dataReceived", requestId="q1", dataLength=39),  # a ping
        _entry("Network.dataReceived", requestId="q1", dataLength=40),
        _entry("Network.responseReceived", requestId="q1"),
    ]
    assert _update_sizes(entries) == [1632, 12964, 40]


def _row(reply: int, page_tps: float, engine_tps: float, browser: float, update_bytes: int, same: bool) -> dict:
    return {"reply": reply, "tokens": 256, "page_tokens_per_s": page_tps, "engine_tokens_per_s": engine_tps,
            "page_over_engine": page_tps / engine_tps, "browser_cpu_pct": browser, "update_bytes_median": update_bytes,
            "same_text": same, "updates": 90, "browser_s": {}, "app_cpu_s": 40.0, "engine_cpu_s": 39.0, "dom_nodes": 1600}


def test_summary_takes_the_first_last_and_median_reply_of_each_drafter():
    results = [
        {"drafter": "none", "replies": [_row(1, 9.0, 10.0, 12.0, 1500, True), _row(2, 12.0, 12.0, 20.0, 1700, True),
                                        _row(3, 5.0, 10.0, 14.0, 2100, False)]},
        {"drafter": "hybrid", "replies": []},  # cut short before its first reply
    ]
    summary = summarize(results)
    assert list(summary) == ["none"]
    s = summary["none"]
    assert s["replies"] == 3
    assert abs(s["first_page_over_engine"] - 0.9) < 1e-12 and abs(s["last_page_over_engine"] - 0.5) < 1e-12
    assert abs(s["median_page_over_engine"] - 0.9) < 1e-12  # of 0.9, 1.0, 0.5 (their mean: 0.8)
    assert s["browser_cpu_pct_median"] == 14.0 and s["browser_cpu_pct_max"] == 20.0
    assert (s["bytes_per_update_first"], s["bytes_per_update_last"], s["same_text"]) == (1500, 2100, 2)
    report = format_report(results, summary)
    assert "0.90×" in report and "0.50×" in report


@pytest.mark.subprocess
def test_the_engine_alone_is_chat_script_in_a_process_of_its_own_and_its_replies_are_the_targets(smollm2_service,
                                                                                                  tmp_path):
    """bench-page's baseline: two greedy replies from `chat --script` in a child process; each
    row's text is the target-only greedy reply (the conversation played here with drafter none),
    its tokens/s its token count over its own seconds."""
    import argparse

    from specchat.commands.bench.page import script_lockstep, script_replies
    from specchat.conversation import Conversation, ReplySettings

    messages = ["Say hello.", "Now say goodbye."]
    args = argparse.Namespace(target="smollm2-135m-instruct", runtime="llamacpp", threads=1, max_new_tokens=12, gamma=4,
                              timeout=120, models=None)
    rows = script_replies(messages, "ngram", args, tmp_path)
    alone = Conversation(seed=0)
    for row, message in zip(rows, messages):
        list(alone.stream(smollm2_service.stream_chat, message, ReplySettings("none", 4, False, 0.0, 1.0, 12)))
        assert row["text"] == alone.messages[-1]["content"]
        assert row["engine_tokens"] == 12 and row["engine_tokens_per_s"] == pytest.approx(12 / row["engine_s"], rel=1e-2)
    with pytest.raises(RuntimeError, match="chat --script failed"):
        script_replies(messages, "ngram", argparse.Namespace(**{**vars(args), "target": "no-such-model"}), tmp_path)
    # --lockstep: the same replies, one at a time, from a process kept loaded (`chat --script -`)
    lockstep = script_lockstep(messages, "ngram", args, tmp_path)
    first = next(lockstep)  # the second message is not sent yet
    assert first["text"] == rows[0]["text"] and [r["text"] for r in lockstep] == [rows[1]["text"]]
    with pytest.raises(RuntimeError, match="gave no reply"):
        list(script_lockstep(messages, "ngram", argparse.Namespace(**{**vars(args), "target": "no-such-model"}), tmp_path))


def test_script_from_stdin_reads_one_json_string_per_line_as_it_comes():
    from specchat.commands.script import read_messages

    read: list[str] = []

    def stdin():
        for line in ['"Say hello."\n', "\n", '"Now: \\"bye\\"."\n', "not json\n"]:
            read.append(line)
            yield line

    messages = read_messages(stdin())
    assert next(messages) == "Say hello." and len(read) == 1  # lazily: nothing read past the first message
    assert next(messages) == 'Now: "bye".' and len(read) == 3  # the blank line skipped
    with pytest.raises(ValueError, match="line 4 is not JSON"):
        next(messages)
    with pytest.raises(ValueError, match="line 1 is not a JSON string of non-blank text"):
        list(read_messages(['"  "']))


def test_the_chat_file_is_a_json_list_of_messages(tmp_path):
    assert len(read_chat(CHAT_SCRIPT)) == 20  # the shipped conversation
    good = tmp_path / "count.json"
    good.write_text('["Count from 1 to 1000, separated by spaces."]')
    assert read_chat(good) == ["Count from 1 to 1000, separated by spaces."]
    for text, why in (("{", "not JSON"), ('{"a": 1}', "not a JSON list"), ("[]", "not a JSON list"),
                      ('["ok", " "]', "not a JSON list"), ("[1]", "not a JSON list")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(ValueError, match=why):
            read_chat(bad)
