"""``specchat bench-page``: how fast the page streams a reply, against the engine on the same reply.

For each drafter asked for, the command first plays the conversation (N messages, greedy, the page's
settings) with the engine alone: ``python -m specchat chat --script --json`` in a process of its own,
nothing else running. Then it starts the app (``python -m specchat app``) in a process of its own,
opens the real page in headless Chromium and sends the same N messages in one conversation. Each
reply in the page is compared with the same reply of the engine alone (at temperature 0 the two
usually make the same tokens; ``same_text`` says when llama.cpp's batch sums made a near-tie go the
other way). With ``--lockstep`` the engine alone plays each message right before the page does, in a
``chat --script -`` process kept loaded (idle while the page streams): on a machine whose speed
drifts (a shared VM), each pair is then measured within minutes. Per reply it reports:

- page tokens/s: the reply's tokens ÷ the time from Send to the page's last change of the chat
  (a MutationObserver in the page, on the browser's own clock);
- engine tokens/s: the same tokens ÷ the time from the call to the last event (prefill included
  in both);
- bytes per update: each chunk of the queue's server-sent-event stream the browser received
  (Chrome's DevTools network events), median and largest;
- CPU: the browser's (every Chromium process) and the app's, in seconds and in % of one core
  over the page time (the engine alone's CPU is not taken: a process of its own).

Writes ``page-bench.json`` to ``--out`` and prints a table and the page's speed goals (page ÷ engine, the browser's CPU). Needs
Debian's chromium and chromium-driver and selenium (``requirements-bench.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from specchat.commands.common import fail
from specchat.core.config import MAX_NEW_TOKENS_LIMIT, MAX_NUM_SPECULATIVE_TOKENS
from specchat.drafters.kinds import KIND_NAMES
from specchat.options import PROG, add_models_argument, add_runtime_argument, ranged
from specchat.runtimes.select import cpu_name
from specchat.ui.session.saved import DEFAULT_MAX_NEW_TOKENS

CHAT_SCRIPT = Path(__file__).with_name("bench_page_chat.json")

# Installed once per page: the time of every change inside the chat (the reply's tokens, its
# summary); the time of Send is taken in the same script that clicks it.
OBSERVE_JS = """
if (!window.__specObs) {
  window.__specLast = 0;
  window.__specObs = new MutationObserver(() => {
    window.__specLast = performance.now();
    if (!window.__specEcho && document.querySelectorAll('#spec-chat [data-testid=user]').length > window.__specUsers)
      window.__specEcho = window.__specLast;
    if (!window.__specFirst && document.querySelector('#spec-chat .spec-running .tok')) window.__specFirst = window.__specLast;
  });
  window.__specObs.observe(document.querySelector('#spec-chat'), {subtree: true, childList: true, characterData: true});
}
"""
SEND_JS = """
const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Send');
window.__specUsers = document.querySelectorAll('#spec-chat [data-testid=user]').length;
window.__specT0 = performance.now(); window.__specLast = 0; window.__specFirst = 0; window.__specEcho = 0;
button.click();
"""
# The latest reply: its summary (it reads "generating…" while the reply streams), how many replies
# there are, the stats line and the reply's own text. Cheap: the page is polled while it streams.
REPLY_JS = """
const bots = document.querySelectorAll('#spec-chat [data-testid=bot]');
const last = bots[bots.length - 1];
const summary = last ? last.querySelector('.spec-summary') : null;
return {replies: bots.length, summary: summary ? summary.innerText : '', t0: window.__specT0,
        stats: (document.querySelector('#spec-stats') || {}).innerText || '',
        text: last ? (last.dataset.text ?? null) : null,
        last: window.__specLast, first: window.__specFirst, echo: window.__specEcho};
"""
# The page's size, once a reply has ended (not while polling: serialising a long chat costs CPU)
SIZE_JS = """
return {nodes: document.getElementsByTagName('*').length,
        chat_html: document.querySelector('#spec-chat').innerHTML.length};
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench-page", help="time replies streamed in the real page (headless Chromium) against the engine alone",
        description="Plays one conversation with the engine alone (chat --script, in a process of its own), then "
                    "starts the app and drives the page in headless Chromium through the same conversation: page "
                    "tokens/s ÷ engine-alone tokens/s, bytes per streamed update, and the browser's and the app's CPU "
                    "time, per reply.",
    )
    p.add_argument("--target", help="models.yaml name, local directory or .gguf file (default: the models.yaml default)")
    add_runtime_argument(p, threads=True)
    p.set_defaults(runtime="llamacpp")
    p.add_argument("--drafters", nargs="+", choices=KIND_NAMES, default=["none", "hybrid"],
                   help="one conversation per drafter, each in a fresh app (default: none hybrid)")
    p.add_argument("--chat", metavar="FILE", default=str(CHAT_SCRIPT),
                   help="the conversation: a JSON list of messages (default: the shipped 20-message coding chat; "
                        "e.g. many-short-token replies: [\"Count from 1 to 1000, separated by spaces.\"])")
    p.add_argument("--messages", type=ranged(int, 1, 200, "1..200"), default=20,
                   help="messages in the conversation (default 20; the shipped script has 20, more repeat it)")
    p.add_argument("--max-new-tokens", type=ranged(int, 16, MAX_NEW_TOKENS_LIMIT, f"16..{MAX_NEW_TOKENS_LIMIT}"),
                   default=256, help="per reply (default 256; the bench sets the page's slider to it)")
    p.add_argument("--gamma", type=ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}"),
                   default=12, help="the most γ adaptive γ may choose (default 12, the page's default)")
    p.add_argument("--window", type=ranged(int, 600, 8000, "600..8000"), default=1000, metavar="HEIGHT",
                   help="the browser window's height in pixels (default 1000: the chat and the stats line on "
                        "screen, the charts below; 3200: every panel on screen, so they redraw live too)")
    p.add_argument("--lockstep", action="store_true",
                   help="the engine alone reply by reply, right before the page's reply to the same message (a "
                        "chat --script process kept loaded beside the idle app): on a machine whose speed drifts, "
                        "each pair is measured minutes apart at most (default: the whole conversation first)")
    p.add_argument("--port", type=ranged(int, 1024, 65535, "1024..65535"), default=7870)
    p.add_argument("--out", default="bench-results", metavar="DIR", help="folder for page-bench.json")
    p.add_argument("--timeout", type=ranged(float, 10, 3600, "10..3600"), default=600,
                   help="seconds a reply (or the app's start) may take (default 600)")
    add_models_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    """``specchat bench-page``; the exit status (2: a usage or set-up error, 1: a failed run)."""
    from specchat.commands import browser

    lacking = browser.missing()
    if lacking:
        return fail(f"the browser is missing: {', '.join(lacking)} "
                    "(apt-get install chromium chromium-driver; pip install -r requirements-bench.txt)", command="bench-page")
    try:
        messages = read_chat(Path(args.chat))
    except (OSError, ValueError) as exc:
        return fail(f"--chat {args.chat}: {exc}", command="bench-page")
    messages = [messages[i % len(messages)] for i in range(args.messages)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    results: list[dict] = []
    meta = {"command": f"{PROG} bench-page " + " ".join(sys.argv[2:]), "cpu_count": os.cpu_count(),
            "processor": cpu_name(), "max_new_tokens": args.max_new_tokens, "gamma": args.gamma,
            "window": [1440, args.window], "date": time.strftime("%Y-%m-%d %H:%M"), "runtime": args.runtime,
            "target": args.target or "the models.yaml default", "chat": args.chat,
            "engine": ("chat --script - kept loaded, each reply right before the page's" if args.lockstep
                       else "chat --script in a process of its own, right before the page's run")}

    def save(done: bool) -> None:
        """Writes what is measured so far (a run cut short keeps its replies)."""
        summary = summarize(results)
        (out / "page-bench.json").write_text(json.dumps(
            {"meta": meta | {"complete": done}, "summary": summary, "runs": results}, indent=1))

    for drafter in args.drafters:
        say(f"bench-page: drafter {drafter}: {len(messages)} messages, {args.max_new_tokens} new tokens each; "
            "the engine alone first (chat --script)")
        try:
            engine = (script_lockstep(messages, drafter, args, out) if args.lockstep
                      else iter(script_replies(messages, drafter, args, out)))
            results.append({"drafter": drafter, "replies": []})
            conversation(engine, drafter, messages, args, out, say, results[-1]["replies"], lambda: save(False))
        except RuntimeError as exc:
            save(False)
            return fail(str(exc), 1, command="bench-page")
    save(True)
    print(format_report(results, summarize(results)))
    print(f"\nwrote {out / 'page-bench.json'}")
    return 0


def read_chat(path: Path) -> list[str]:
    """The messages of a ``--chat`` file: a JSON list of non-blank strings.

    Raises:
        OSError: the file cannot be read. ValueError: it is not such a list (the message says why).
    """
    try:
        messages = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    if not isinstance(messages, list) or not messages or not all(isinstance(m, str) and m.strip() for m in messages):
        raise ValueError('not a JSON list of messages, e.g. ["Count from 1 to 100."]')
    return messages


def conversation(engine: Iterator[dict], drafter: str, messages: list[str], args, out: Path, say, rows: list[dict],
                 saved: Callable[[], None]) -> None:
    """One conversation in a fresh app on ``drafter``: each message in the page, beside the same
    reply of the engine alone (``engine``: :func:`script_replies`); a row per reply appended to
    ``rows``, then ``saved()``."""
    from specchat.commands import browser

    log = open(out / f"page-bench-app-{drafter}.log", "w")  # noqa: SIM115 (closed below)
    cmd = [sys.executable, "-m", "specchat", "app", "--runtime", args.runtime, "--drafter", drafter,
           "--port", str(args.port)]
    cmd += ["--target", args.target] if args.target else []
    cmd += ["--threads", str(args.threads)] if args.threads else []
    app = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    d = None
    try:
        _wait_for_ready(out / f"page-bench-app-{drafter}.log", app, args.timeout)
        d = browser.driver(1440, args.window, performance_log=True)
        d.get(f"http://127.0.0.1:{args.port}")
        browser.wait_ready(d, args.timeout)
        if args.max_new_tokens != DEFAULT_MAX_NEW_TOKENS:
            browser.set_number(d, "max new tokens", args.max_new_tokens)
        if args.gamma != 12:
            browser.set_number(d, "γ: draft tokens", args.gamma)
        d.execute_script(OBSERVE_JS)
        d.get_log("performance")  # drop what loading the page logged
        for number, (message, alone) in enumerate(zip(messages, engine), 1):
            _wait_idle([app.pid])  # the app at rest before each message
            row = page_reply(d, app.pid, message, number, args.timeout)
            # each side goes on from its own reply (llama.cpp's sums can round differently in
            # batches of other sizes, so a near-tie may rarely go the other way: same_text says when)
            alone = dict(alone)
            row["same_text"] = alone.pop("text") == row.pop("text")
            row.update(alone)
            row["page_over_engine"] = row["page_tokens_per_s"] / alone["engine_tokens_per_s"]
            rows.append(row)
            saved()
            say(f"  reply {number:>2}: {row['tokens']:>3} tokens, page {row['page_tokens_per_s']:.2f} tok/s, engine "
                f"{alone['engine_tokens_per_s']:.2f} tok/s ({row['page_over_engine']:.2f}×), browser "
                f"{row['browser_cpu_pct']:.0f}% of a core, {row['updates']} updates of median "
                f"{row['update_bytes_median']} B")
    finally:
        if d is not None:
            d.quit()
        app.terminate()
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
        log.close()


def page_reply(d, app_pid: int, message: str, number: int, timeout: float) -> dict:
    """Send ``message`` in the page and wait for reply ``number`` to finish: its timing, bytes
    per streamed update and CPU times."""
    from selenium.webdriver.common.by import By

    box = d.find_element(By.CSS_SELECTOR, "#spec-input textarea")
    box.send_keys(message)
    browsers = _descendants(d.service.process.pid)
    cpu0 = {pid: _cpu_s(pid) for pid in browsers + [app_pid]}
    metrics0 = _browser_metrics(d)
    d.execute_script(SEND_JS)
    deadline = time.time() + timeout
    while True:  # the page's own clock times the reply (the observer); polling only says when it is over
        time.sleep(1.0)
        state = d.execute_script(REPLY_JS)
        if state["replies"] >= number and state["summary"] and "generating" not in state["summary"]:
            break
        if time.time() > deadline:
            raise TimeoutError(f"reply {number} did not finish in {timeout:.0f} s")
    cpu1 = {pid: _cpu_s(pid) for pid in cpu0}
    metrics1 = _browser_metrics(d)
    state |= d.execute_script(SIZE_JS)
    spent = {k: round(metrics1.get(k, 0) - metrics0.get(k, 0), 3) for k in BROWSER_METRICS}
    page_s = (state["last"] - state["t0"]) / 1000
    match = re.match(r"(\d+) tokens", state["summary"])
    tokens = int(match.group(1)) if match else 0
    speed = re.search(r"speed\s+([0-9.]+) tok/s", state["stats"])
    sizes = _update_sizes(d.get_log("performance"))
    browser_s = sum(cpu1[p] - cpu0[p] for p in browsers)
    app_s = cpu1[app_pid] - cpu0[app_pid]
    return {
        "reply": number, "tokens": tokens, "text": state["text"], "page_s": round(page_s, 3),
        "page_tokens_per_s": tokens / page_s,
        "page_first_s": round((state["first"] - state["t0"]) / 1000, 3) if state["first"] else None,
        "page_echo_s": round((state["echo"] - state["t0"]) / 1000, 3) if state["echo"] else None,
        "updates": len(sizes), "update_bytes_median": int(statistics.median(sizes)) if sizes else 0,
        "update_bytes_max": max(sizes, default=0), "update_bytes_total": sum(sizes),
        "browser_cpu_s": round(browser_s, 3), "browser_cpu_pct": 100 * browser_s / page_s,
        "app_cpu_s": round(app_s, 3), "app_cpu_pct": 100 * app_s / page_s,
        "app_decode_tokens_per_s": float(speed.group(1)) if speed else None,  # the page's stats line
        "dom_nodes": state["nodes"], "chat_html_chars": state["chat_html"],
        "browser_s": spent,  # the renderer's own timings (DevTools Performance.getMetrics), seconds
    }


def script_replies(messages: list[str], drafter: str, args, out: Path) -> list[dict]:
    """The conversation played by the engine alone: ``python -m specchat chat --script --json``
    in a process of its own, greedy, the page's settings (adaptive γ up to ``args.gamma``, the
    same max new tokens, runtime, threads and models). One dict per reply: its text, tokens,
    seconds from the message to the reply's end, tokens/s over that time and over decoding, the
    first token's and the prefill's seconds.

    Raises:
        RuntimeError: the script failed (its stderr is in ``out/page-bench-script-DRAFTER.log``).
    """
    script = out / f"page-bench-script-{drafter}.json"
    script.write_text(json.dumps(messages))
    log = out / f"page-bench-script-{drafter}.log"
    with open(log, "w") as err:
        done = subprocess.run(_script_command(str(script), drafter, args), stdout=subprocess.PIPE, stderr=err, text=True,
                              timeout=args.timeout * len(messages))
    if done.returncode != 0:
        raise RuntimeError(f"chat --script failed (status {done.returncode}); see {log}")
    rows = [_engine_row(json.loads(line)) for line in done.stdout.splitlines()]
    if len(rows) != len(messages):
        raise RuntimeError(f"chat --script gave {len(rows)} replies for {len(messages)} messages; see {log}")
    return rows


def script_lockstep(messages: list[str], drafter: str, args, out: Path) -> Iterator[dict]:
    """:func:`script_replies`, one reply at a time: a ``chat --script - --json`` process stays loaded
    and plays each message when the next row is asked for (:func:`conversation` asks right before
    the page's reply to the same message), so each pair is measured within minutes even where the
    machine's speed drifts. The process is idle while the page streams (it waits on its stdin).

    Raises:
        RuntimeError: the process ended or gave no reply within ``args.timeout`` (its stderr is
            in ``out/page-bench-script-DRAFTER.log``).
    """
    log = out / f"page-bench-script-{drafter}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(_script_command("-", drafter, args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], args.timeout)
            line = proc.stdout.readline() if ready else ""
            if not line:
                raise RuntimeError(f"chat --script - gave no reply (status {proc.poll()}); see {log}")
            yield _engine_row(json.loads(line))
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _script_command(script: str, drafter: str, args) -> list[str]:
    cmd = [sys.executable, "-m", "specchat", "chat", "--script", script, "--json", "--drafter", drafter,
           "--runtime", args.runtime, "--max-new-tokens", str(args.max_new_tokens), "-k", str(args.gamma)]
    cmd += ["--target", args.target] if args.target else []
    cmd += ["--threads", str(args.threads)] if args.threads else []
    return cmd + (["--models", args.models] if getattr(args, "models", None) else [])


def _engine_row(r: dict) -> dict:
    """A ``chat --script --json`` record as the engine's half of a row."""
    tokens, seconds = len(r["token_ids"]), r["wall_ms"] / 1000
    decode_ms = r["stats"]["decode_ms"]
    return {"text": r["text"], "engine_tokens": tokens, "engine_s": round(seconds, 3),
            "engine_tokens_per_s": tokens / seconds,
            "engine_decode_tokens_per_s": tokens / decode_ms * 1000 if decode_ms else None,
            "engine_prefill_s": round(r["prefill_ms"] / 1000, 3),
            "engine_first_s": round(r["ttft_ms"] / 1000, 3) if r["ttft_ms"] is not None else None}


def summarize(results: list[dict]) -> dict:
    """Per drafter: page ÷ engine at the first and the last reply and their median, the browser's
    CPU, and bytes per update against the reply's length and its place in the conversation."""
    out = {}
    for run in results:
        rows = run["replies"]
        if not rows:
            continue
        ratios = [r["page_over_engine"] for r in rows]
        out[run["drafter"]] = {
            "replies": len(rows),
            "first_page_over_engine": ratios[0], "last_page_over_engine": ratios[-1],
            "median_page_over_engine": statistics.median(ratios),
            "browser_cpu_pct_median": statistics.median(r["browser_cpu_pct"] for r in rows),
            "browser_cpu_pct_max": max(r["browser_cpu_pct"] for r in rows),
            "bytes_per_update_first": rows[0]["update_bytes_median"],
            "bytes_per_update_last": rows[-1]["update_bytes_median"],
            "same_text": sum(bool(r.get("same_text")) for r in rows),
        }
    return out


COLUMNS = ("reply", "tokens", "first text page/engine s", "page tok/s", "engine tok/s", "page÷engine",
           "decode app/engine tok/s", "updates", "B/update", "browser CPU", "script/layout/style s", "app CPU s",
           "DOM nodes")


def format_report(results: list[dict], summary: dict) -> str:
    """The per-reply table of each drafter's conversation and the page's speed goals."""
    lines = []
    for run in results:
        lines.append(f"\ndrafter {run['drafter']}:")
        rows = [COLUMNS]
        for r in run["replies"]:
            b = r.get("browser_s", {})
            rows.append((
                str(r["reply"]), str(r["tokens"]), f"{_num(r.get('page_first_s'))}/{_num(r.get('engine_first_s'))}",
                f"{r['page_tokens_per_s']:.2f}", f"{r['engine_tokens_per_s']:.2f}", f"{r['page_over_engine']:.2f}×",
                _decode(r), str(r["updates"]), str(r["update_bytes_median"]), f"{r['browser_cpu_pct']:.0f}%",
                f"{b.get('ScriptDuration', 0):.2f}/{b.get('LayoutDuration', 0):.2f}/{b.get('RecalcStyleDuration', 0):.2f}",
                f"{r['app_cpu_s']:.1f}", str(r["dom_nodes"]),
            ))
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.append("\nthe page's speed goals:")
    for drafter, s in summary.items():
        n = s["replies"]
        for text, value, met in (
            (f"{drafter}: page ÷ engine, reply 1 >= 0.95", s["first_page_over_engine"], s["first_page_over_engine"] >= 0.95),
            (f"{drafter}: page ÷ engine, reply {n} >= 0.90", s["last_page_over_engine"], s["last_page_over_engine"] >= 0.90),
            (f"{drafter}: browser CPU while streaming <= 15 % (median)", s["browser_cpu_pct_median"],
             s["browser_cpu_pct_median"] <= 15),
        ):
            lines.append(f"  {text:<58} {value:>7.2f}  {'met' if met else 'NOT met'}")
        lines.append(f"  {drafter}: bytes per update, reply 1 / reply {n}: {s['bytes_per_update_first']} / "
                     f"{s['bytes_per_update_last']}; the same text in page and engine: {s['same_text']} of {n} replies")
    return "\n".join(lines)


def _num(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def _decode(row: dict) -> str:
    app, engine = row.get("app_decode_tokens_per_s"), row.get("engine_decode_tokens_per_s")
    return f"{app:.1f}/{engine:.1f}" if app and engine else "–"


def _wait_for_ready(log_path: Path, app: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = log_path.read_text(errors="replace")
        if "Ready:" in text:
            return
        if app.poll() is not None or "error: loading the models failed" in text:
            raise RuntimeError(f"the app did not start (exit {app.poll()}); its output is in {log_path}")
        time.sleep(1)
    raise TimeoutError(f"the app was not ready in {timeout:.0f} s; its output is in {log_path}")


def _update_sizes(entries: list[dict]) -> list[int]:
    """Bytes of each streamed update in Chrome's DevTools log entries: each chunk the browser
    received on the queue's server-sent-event streams (``/gradio_api/queue/data``; the server
    flushes each event as it is yielded) and on a reply's live channel (``/specchat/live/…``),
    without the keep-alive pings (under 40 bytes)."""
    streams, sizes = set(), []
    for entry in entries:
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        url = params["request"]["url"] if message.get("method") == "Network.requestWillBeSent" else ""
        if "/queue/data" in url or "/specchat/live/" in url:
            streams.add(params["requestId"])
        elif message.get("method") == "Network.dataReceived" and params.get("requestId") in streams:
            if params["dataLength"] >= 40:
                sizes.append(int(params["dataLength"]))
    return sizes


BROWSER_METRICS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")


def _browser_metrics(d) -> dict[str, float]:
    """Chrome's own counters of the page's main thread (seconds spent in tasks, script, layout,
    style), from DevTools ``Performance.getMetrics``."""
    d.execute_cdp_cmd("Performance.enable", {})
    return {m["name"]: m["value"] for m in d.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}


def _wait_idle(pids: list[int], timeout: float = 20.0) -> None:
    """Wait until these processes use under 5 % of a core together (two half-second looks in a
    row), at most ``timeout`` seconds."""
    deadline, quiet = time.time() + timeout, 0
    before = sum(_cpu_s(p) for p in pids)
    while time.time() < deadline and quiet < 2:
        time.sleep(0.5)
        now = sum(_cpu_s(p) for p in pids)
        quiet = quiet + 1 if now - before < 0.025 else 0
        before = now


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (chromedriver's Chromium processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
