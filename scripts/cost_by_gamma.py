"""c = d / t₁ against γ: a model drafter's time per drafted token at fixed γ = 1, 2, 4, 8, over one
target-only step timed right before (greedy, llama.cpp by default, adaptive γ off).

Each round's first drafter pass also reads the tokens the last round committed (the bonus or the
resampled token, and the last draft), so a round that drafts few tokens pays more per token. The
drafter menu's c is the calibration's, at the γ adaptive γ chose there; a reply's c is at its own.

    python scripts/cost_by_gamma.py --drafter sibling [--context short|long|both]

Prints, per γ: tokens drafted, rounds, d (ms per drafted token), c, and the median drafting time of
a round. Nothing else should run meanwhile (2 cores: any load moves every figure).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specchat.core.config import GenerationConfig  # noqa: E402
from specchat.core.events import RoundEvent  # noqa: E402
from specchat.service import ChatService  # noqa: E402

MESSAGE = ("Write a Python function is_palindrome(text) that ignores case, spaces and punctuation, "
           "with a docstring and two examples.")


def run(service: ChatService, history: list, gamma: int, drafter: str, tokens: int):
    ids, _ = service.encode_chat(history, MESSAGE, tokens)
    config = GenerationConfig(max_new_tokens=tokens, num_speculative_tokens=max(gamma, 1), adaptive_gamma=False,
                              measure_speedup=False)
    drafted, draft_ms, rounds, steps = 0, 0.0, [], []
    for event in service.generate(ids, drafter=drafter, config=config):
        if isinstance(event, RoundEvent):
            if event.num_drafted:
                drafted += event.num_drafted
                draft_ms += event.draft_ms
                rounds.append(event.draft_ms)
            else:
                steps.append(event.round_ms - event.draft_ms)
    return len(ids), drafted, draft_ms, steps, rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="sibling")
    parser.add_argument("--runtime", default="llamacpp")
    parser.add_argument("--context", choices=("short", "long", "both"), default="both")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    service = ChatService(runtime=args.runtime)
    service.start(args.drafter).join()
    if service.startup_error is not None:
        raise SystemExit(service.startup_error)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()[:6000]
    contexts = {"short": [], "long": [{"role": "user", "content": "Read this:\n" + readme},
                                      {"role": "assistant", "content": "I have read it."}]}
    for name in (("short", "long") if args.context == "both" else (args.context,)):
        history = contexts[name]
        run(service, history, 0, "none", args.tokens)  # warm-up
        n, _, _, steps, _ = run(service, history, 0, "none", args.tokens)
        t1 = statistics.median(steps)
        print(f"{name}: prompt {n} tokens, t1 median {t1:.1f} ms", flush=True)
        for gamma in (1, 2, 4, 8):
            _, drafted, draft_ms, _, rounds = run(service, history, gamma, args.drafter, args.tokens)
            print(f"  gamma {gamma}: drafted {drafted} in {len(rounds)} rounds, d = {draft_ms / drafted:.1f} ms/token, "
                  f"c = {draft_ms / drafted / t1:.2f}, per round median {statistics.median(rounds):.1f} ms", flush=True)
        _, _, _, steps, _ = run(service, history, 0, "none", args.tokens)
        print(f"  t1 after: {statistics.median(steps):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
