"""Issue 43's goal for a drafter that loses here: with the defaults (adaptive γ) on open chat, over
a whole reply of 128 tokens, at least 0.97× target-only.

Each open-chat prompt is answered by ``none`` and by the drafter back to back (the order swapped
on every other repeat), each reply from fresh adaptive-γ state (a new conversation: the worst
case, nothing learned yet) and no kept prefix. A reply's speed is its decode rate (tokens / decode
time; the prefill, where a model drafter also reads the prompt, is reported apart). Printed per
reply: the rate, the in-reply speedup against the reply's own target-only steps with its 95 %
interval, the drafting rounds and their loss against the target steps timed in the same reply.

usage: python scripts/losing_drafter.py [--drafter sibling] [--repeats 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specchat.core import evidence  # noqa: E402
from specchat.core.config import GenerationConfig  # noqa: E402
from specchat.core.events import RoundEvent  # noqa: E402
from specchat.core.metrics import SpeculationMetrics  # noqa: E402
from specchat.service import ChatService  # noqa: E402

PROMPTS = [
    "Write a detailed explanation, in several paragraphs, of how a hash table works.",
    "Tell me a long story about a lighthouse keeper and a storm.",
    "Explain in detail the causes of the French Revolution.",
]


def reply(service: ChatService, prompt: str, kind: str, max_new_tokens: int) -> dict:
    service.forget_prefix()
    service.engine.gamma_controllers, service.engine.gamma_costs = {}, {}
    config = GenerationConfig(max_new_tokens=max_new_tokens, num_speculative_tokens=12, adaptive_gamma=True,
                              measure_speedup=True)
    m, rounds = SpeculationMetrics(), []
    for event in service.stream_chat([], prompt, drafter=kind, config=config):
        m.update(event)
        if isinstance(event, RoundEvent):
            rounds.append(event)
    steps = [r.round_ms for r in rounds if not r.num_drafted]
    t1 = statistics.median(steps)
    drafting = [r for r in rounds if r.num_drafted]
    measured = evidence.measured_speedup(m)
    return {
        "drafter": kind, "prompt": prompt, "tokens": m.num_committed, "tokens_per_s": m.tokens_per_s,
        "speedup_in_reply": measured.value, "half_width": measured.half_width,
        "drafting_rounds": len(drafting), "drafting_loss_ms": sum(r.round_ms - r.num_committed * t1 for r in drafting),
        "prefill_ms": m.done.prefill_ms, "drafter_prefill_ms": m.done.drafter_prefill_ms,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="sibling")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    service = ChatService(runtime="llamacpp")
    service.load()
    runs = []
    for repeat in range(args.repeats):
        for prompt in PROMPTS:
            for kind in (["none", args.drafter] if repeat % 2 == 0 else [args.drafter, "none"]):
                row = reply(service, prompt, kind, args.max_new_tokens)
                runs.append(row)
                print(f"{kind:8} {prompt[:24]:24} {row['tokens']} tokens {row['tokens_per_s']:.2f} tok/s; in reply "
                      f"{row['speedup_in_reply']:.3f}× ±{row['half_width']:.3f}; {row['drafting_rounds']} drafting rounds "
                      f"lost {row['drafting_loss_ms']:.0f} ms; prefill {row['prefill_ms']:.0f} ms "
                      f"(drafter {row['drafter_prefill_ms'] or 0:.0f})", flush=True)
    pairs = [(a, b) for a, b in zip(runs[::2], runs[1::2])]
    ratios = [next(r for r in p if r["drafter"] != "none")["tokens_per_s"] / next(r for r in p if r["drafter"] == "none")["tokens_per_s"]
              for p in pairs]
    in_reply = [r["speedup_in_reply"] for r in runs if r["drafter"] != "none"]
    summary = {"pairwise_median": statistics.median(ratios), "pairwise": ratios,
               "in_reply_median": statistics.median(in_reply), "goal": 0.97}
    print(f"{args.drafter}: decode rate ÷ target-only's on the same prompt, median {summary['pairwise_median']:.3f} "
          f"(each {', '.join(f'{r:.3f}' for r in ratios)}); in-reply speedup median {summary['in_reply_median']:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
                                              "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
