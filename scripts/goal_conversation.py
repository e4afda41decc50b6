"""Issue 43's conversation goal, measured: open-chat turns, then code edits that copy their input,
with each drafter configuration against target-only on the same turns.

Each repeat plays the conversation (``scripts/goal_conversation.json``: three short open-chat
questions, a rename in a 19-line function, type hints on it) with every configuration, turn by
turn: each turn is sent with the same history to every configuration back to back, in an order
rotated per turn and repeat (greedy replies are the target's whatever the drafter, so the history
is the same; the script checks it), so that a configuration and ``none`` are timed within a
minute or two of each other on this noisy shared machine. Each configuration keeps its own
adaptive-γ controllers across the turns of a repeat (as the app does in one conversation), fresh
at each repeat. A turn's speed is its decode rate (tokens / decode time, prefill left out). The
ratio to ``none`` is taken over the chat turns and over the edits of each repeat, then the median
over repeats.

usage: python scripts/goal_conversation.py [--repeats 2] [--max-new-tokens 256] [--out FILE.json]
       [--configs none ngram hybrid ngram:2 ngram:4 hybrid:2 sibling]   (kind, or kind:γ fixed)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specchat.commands.generate import summary_line  # noqa: E402
from specchat.core import evidence  # noqa: E402
from specchat.core.config import GenerationConfig  # noqa: E402
from specchat.core.metrics import SpeculationMetrics  # noqa: E402
from specchat.service import ChatService  # noqa: E402
from specchat.ui.html.render import reply_summary  # noqa: E402

CHAT_TURNS, EDIT_TURNS = (0, 1, 2), (3, 4)


def parse_config(text: str) -> tuple[str, int | None]:
    kind, _, gamma = text.partition(":")
    return kind, int(gamma) if gamma else None


def play_turn(service: ChatService, history: list[dict], message: str, config: str, max_new_tokens: int,
              controllers: dict) -> tuple[dict, str]:
    """One turn of ``config`` with ``history``: its figures and its text. ``controllers`` keeps this
    configuration's adaptive-γ state between its turns (swapped into the engine for the turn)."""
    kind, fixed = parse_config(config)
    service.forget_prefix()
    engine = service.engine
    engine.gamma_controllers, engine.gamma_costs = controllers.setdefault("c", {}), controllers.setdefault("k", {})
    gen = GenerationConfig(max_new_tokens=max_new_tokens, num_speculative_tokens=fixed or 12,
                           adaptive_gamma=fixed is None, measure_speedup=True)
    m = SpeculationMetrics()
    for event in service.stream_chat(history, message, drafter=kind, config=gen):
        m.update(event)
    done = m.done
    measured = evidence.measured_speedup(m)
    return {
        "tokens": m.num_committed, "decode_ms": m.decode_ms, "tokens_per_s": m.tokens_per_s,
        "alpha": m.acceptance_rate, "tokens_per_round": m.mean_tokens_per_round,
        "paused_rounds": m.num_paused_rounds, "rounds": m.num_rounds,
        "speedup_in_reply": measured.value, "speedup_half_width": measured.half_width,
        "claims": [c for text in (summary_line(kind, m, done), reply_summary(m))
                   for c in evidence.contradictions(text, m)],
    }, done.text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--configs", nargs="+", default=["none", "ngram", "hybrid", "ngram:2", "ngram:4", "hybrid:2"])
    parser.add_argument("--script", default=str(Path(__file__).with_name("goal_conversation.json")))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    messages = json.loads(Path(args.script).read_text())
    service = ChatService(runtime="llamacpp")
    service.load()
    for kind in {parse_config(c)[0] for c in args.configs} - {"none"}:
        service.prepare_drafter(kind)
    service.warm_up("hybrid" if "hybrid" in service.drafter_kinds() else "none")
    runs: dict[str, list[list[dict]]] = {c: [] for c in args.configs}
    started, differ = time.time(), 0
    for r in range(args.repeats):
        states = {c: {} for c in args.configs}  # each configuration's controllers, fresh per repeat
        history: list[dict] = []
        for c in args.configs:
            runs[c].append([])
        for t, message in enumerate(messages):
            k = (r * len(messages) + t) % len(args.configs)
            texts = {}
            for config in args.configs[k:] + args.configs[:k]:
                record, texts[config] = play_turn(service, history, message, config, args.max_new_tokens, states[config])
                runs[config][r].append(record)
            differ += len(set(texts.values())) > 1  # greedy: the same text whatever the drafter
            history += [{"role": "user", "content": message}, {"role": "assistant", "content": texts["none"]}]
            print(f"repeat {r + 1} turn {t + 1}: " + "  ".join(f"{c} {runs[c][r][t]['tokens_per_s']:.1f}"
                                                            for c in args.configs)
                  + f"  ({time.time() - started:.0f} s)", flush=True)
    print(f"turns whose replies differed between configurations: {differ} (greedy: should be 0)")
    summary = {}
    for config in args.configs:
        ratios = {"chat": [], "edits": []}
        for r, turns in enumerate(runs[config]):
            base = runs["none"][r]
            for part, idx in (("chat", CHAT_TURNS), ("edits", EDIT_TURNS)):
                mine = sum(turns[i]["tokens"] for i in idx) / sum(turns[i]["decode_ms"] for i in idx)
                theirs = sum(base[i]["tokens"] for i in idx) / sum(base[i]["decode_ms"] for i in idx)
                ratios[part].append(mine / theirs)
        summary[config] = {part: {"median": statistics.median(v), "each": v} for part, v in ratios.items()}
        summary[config]["contradictions"] = sum(len(t["claims"]) for turns in runs[config] for t in turns)
        print(f"{config:9s} chat {summary[config]['chat']['median']:.2f}x  edits {summary[config]['edits']['median']:.2f}x"
              f"  (each: chat {', '.join(f'{x:.2f}' for x in ratios['chat'])}; edits "
              f"{', '.join(f'{x:.2f}' for x in ratios['edits'])}); contradicted claims: "
              f"{summary[config]['contradictions']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M"),
                                              "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
