"""Where the time goes: specchat vs transformers' assisted generation, same models, one prompt.

    python scripts/profile_drafter.py --drafter int4 [--prompt-id edit-typehints] [--max-new-tokens 48]

For each engine: wall time, and the time inside the target's and the drafter's forward passes
(forward hooks on the two top-level modules: count and milliseconds), the rest being the
engine's own work (sampling, verification, cache cuts, Python). Then torch.profiler's top
operators by self CPU time for the specchat run. Greedy, one warm-up run of each first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from specchat.commands.bench import runner as bench  # noqa: E402
from specchat.service import ChatService  # noqa: E402


class ForwardClock:
    """Accumulates wall time spent inside a module's forward (pre/post hooks)."""

    def __init__(self, module: torch.nn.Module):
        self.ms = 0.0
        self.calls = 0
        self._t = 0.0
        self._handles = [
            module.register_forward_pre_hook(self._pre),
            module.register_forward_hook(self._post),
        ]

    def _pre(self, *_):
        self._t = time.perf_counter()

    def _post(self, *_):
        self.ms += (time.perf_counter() - self._t) * 1000
        self.calls += 1

    def reset(self):
        self.ms, self.calls = 0.0, 0

    def remove(self):
        for h in self._handles:
            h.remove()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="int4", choices=["sibling", "sibling-int4", "int4", "ngram"])
    parser.add_argument("--prompt-id", default="edit-typehints")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-gamma", type=int, default=12)
    args = parser.parse_args()

    prompt = next(p for p in bench.load_prompts() if p.id == args.prompt_id)
    service = ChatService()
    service.load()
    drafter = service.prepare_drafter(args.drafter)
    ids = service.encode_chat([], prompt.message, args.max_new_tokens)[0]
    target_clock = ForwardClock(service.engine.target.model)
    drafter_clock = ForwardClock(drafter.runtime.model) if hasattr(drafter, "runtime") else None
    ours = bench.BenchConfig(bench.SPECCHAT, args.drafter, None, args.max_gamma)
    theirs = bench.BenchConfig(bench.TRANSFORMERS, args.drafter)
    runners = {ours: bench.run_specchat, theirs: bench.run_transformers}
    for config, run in runners.items():
        run(service, ids, config, 8)  # warm-up
    print(f"prompt {prompt.id}, {len(ids)} prompt tokens, drafter {args.drafter}, greedy, {args.max_new_tokens} new tokens")
    print(f"{'engine':<14} {'total ms':>9} {'tokens':>6} {'target fwd':>16} {'drafter fwd':>16} {'rest ms':>8}")
    for config, run in runners.items():
        target_clock.reset()
        if drafter_clock:
            drafter_clock.reset()
        t0 = time.perf_counter()
        raw = run(service, ids, config, args.max_new_tokens)
        total = (time.perf_counter() - t0) * 1000
        d_ms, d_calls = (drafter_clock.ms, drafter_clock.calls) if drafter_clock else (0.0, 0)
        rest = total - target_clock.ms - d_ms
        print(f"{config.engine:<14} {total:9.0f} {raw['num_tokens']:6d} "
              f"{target_clock.calls:4d}× {target_clock.ms:8.0f} ms {d_calls:4d}× {d_ms:8.0f} ms {rest:8.0f}")
    target_clock.remove()
    if drafter_clock:
        drafter_clock.remove()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        bench.run_specchat(service, ids, ours, args.max_new_tokens)
    print("\ntorch.profiler, specchat run: top operators by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
