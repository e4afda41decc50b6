"""Issue 43's conversation goal, measured: open-chat turns, then code edits that copy their input,
with each drafter configuration against target-only on the same turns.

Each repeat plays the conversation (``scripts/goal_conversation.json``: three short open-chat
questions, a rename in a 19-line function, type hints on it) once per configuration, in a
rotated order, from a fresh conversation and fresh adaptive-γ controllers (as a new app would),
through :func:`specchat.commands.script.play_script` (what ``specchat chat --script`` runs). A
turn's speed is its decode rate (tokens / decode time, prefill left out). The ratio of a
configuration to ``none`` is taken turn by turn within the same repeat (the same load), then
the median over repeats; the chat turns and the edits are summarised apart.

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
from specchat.commands.script import play_script  # noqa: E402
from specchat.core import evidence  # noqa: E402
from specchat.core.config import GenerationConfig  # noqa: E402
from specchat.service import ChatService  # noqa: E402
from specchat.ui.render import reply_summary  # noqa: E402

CHAT_TURNS, EDIT_TURNS = (0, 1, 2), (3, 4)


def parse_config(text: str) -> tuple[str, int | None]:
    kind, _, gamma = text.partition(":")
    return kind, int(gamma) if gamma else None


def play(service: ChatService, messages: list[str], config: str, max_new_tokens: int) -> list[dict]:
    kind, fixed = parse_config(config)
    service.forget_prefix()
    engine = service.engine
    engine.gamma_controllers.clear()
    engine.gamma_costs.clear()

    def config_for_turn(_: int) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=max_new_tokens, num_speculative_tokens=fixed or 12,
                                adaptive_gamma=fixed is None, measure_speedup=True)

    out = []
    for turn in play_script(service, messages, drafter=kind, config_for_turn=config_for_turn):
        m = turn.metrics
        measured = evidence.measured_speedup(m)
        out.append({
            "tokens": m.num_committed, "decode_ms": m.decode_ms, "tokens_per_s": m.tokens_per_s,
            "alpha": m.acceptance_rate, "tokens_per_round": m.mean_tokens_per_round,
            "paused_rounds": m.num_paused_rounds, "rounds": m.num_rounds,
            "speedup_in_reply": measured.value, "speedup_half_width": measured.half_width,
            "claims": [c for text in (summary_line(kind, m, turn.done), reply_summary(m))
                       for c in evidence.contradictions(text, m)],
        })
    return out


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
    started = time.time()
    for r in range(args.repeats):
        order = args.configs[r % len(args.configs):] + args.configs[:r % len(args.configs)]
        for config in order:
            turns = play(service, messages, config, args.max_new_tokens)
            runs[config].append(turns)
            print(f"repeat {r + 1} {config:9s} " + " ".join(f"{t['tokens_per_s']:5.1f}" for t in turns)
                  + f"  ({time.time() - started:.0f} s)", flush=True)
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
