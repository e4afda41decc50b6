"""Replay greedy rounds offline to choose the hybrid drafter's lookup threshold (issue 14).

Greedy output is the target's whatever the drafter, so one reply per prompt (generated with a
drafter, for speed) gives the reference. A draft from position i is accepted as far as it agrees
with the reference: for the lookup that is a comparison; for the model drafter, its argmax at
each position of the reference (one teacher-forced pass) tells how far its chain would agree.
Each round is then costed with times measured here, in this run: the target's verify pass v(n)
and the drafter's step. It ranks policies; the bench is what proves them.

    python scripts/tune_hybrid.py [--drafter sibling-int4] [--per-group 2] [--tokens 96]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specchat.commands.bench import runner as bench  # noqa: E402
from specchat.core.config import GenerationConfig  # noqa: E402
from specchat.core.events import DoneEvent  # noqa: E402
from specchat.drafters.hybrid import frequent_continuation  # noqa: E402
from specchat.drafters.ngram import lookup  # noqa: E402
from specchat.service import ChatService  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--drafter", default="sibling-int4")
parser.add_argument("--per-group", type=int, default=2)
parser.add_argument("--tokens", type=int, default=96)
parser.add_argument("--gamma", type=int, default=8)
args = parser.parse_args()

service = ChatService()
service.load()
drafter = service.prepare_drafter(args.drafter)
engine = service.engine
prompts = [p for g in bench.GROUPS for p in [q for q in bench.load_prompts() if q.group == g][: args.per_group]]


def timed(fn, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1000


# costs measured now: target pass over n new tokens after a 300-token cache; one drafter step
from transformers import DynamicCache  # noqa: E402

from specchat.runtimes.transformers import cut_cache  # noqa: E402

ids = torch.randint(100, 5000, (1, 300))
with torch.inference_mode():
    def pass_ms(model, n):
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)

        def step():
            model(input_ids=ids[:, :n], cache=cache, use_cache=True)
            cut_cache(cache, 300)
        return timed(step)

    verify = {n: pass_ms(engine.target.model, n) for n in (1, 3, 5, 9)}
    draft_ms = pass_ms(drafter.runtime.model, 1)
slope = (verify[9] - verify[1]) / 8


def v(n):  # verify pass of n draft tokens + 1
    return verify[1] + slope * n


print(f"measured: target v(0)={verify[1]:.0f} ms, v(2)={verify[3]:.0f}, v(4)={verify[5]:.0f}, v(8)={verify[9]:.0f}; "
      f"{args.drafter} step {draft_ms:.0f} ms", flush=True)

cases = []
for p in prompts:
    prompt_ids, _ = service.encode_chat([], p.message, args.tokens)
    done = None
    for e in service.generate(prompt_ids, drafter=args.drafter, config=GenerationConfig(max_new_tokens=args.tokens)):
        if isinstance(e, DoneEvent):
            done = e
    full = list(prompt_ids) + list(done.token_ids)
    with torch.inference_mode():
        logits = drafter.runtime.model(input_ids=torch.tensor([full])).logits[0]
    model_next = logits.argmax(-1).tolist()  # model_next[j] = drafter's greedy token after full[:j+1]
    cases.append((p, len(prompt_ids), full, model_next))
    print(f"{p.id}: {len(done.token_ids)} tokens", flush=True)


def model_run(full, model_next, pos, k):
    """How many of the model's k greedy drafts from position pos agree with the reference."""
    n = 0
    while n < k and pos + n < len(full) and model_next[pos + n - 1] == full[pos + n]:
        n += 1
    return n


def simulate(policy, n_prompt, full, model_next):
    pos, ms = n_prompt, 0.0
    rounds = lookups = 0
    while pos < len(full):
        src, tokens = policy(np.asarray(full[:pos], dtype=np.int64))
        room = len(full) - pos
        if src == "lookup":
            acc = 0
            while acc < min(len(tokens), room - 1) and tokens[acc] == full[pos + acc]:
                acc += 1
            ms += v(len(tokens))
            lookups += 1
        elif src == "model":
            k = min(args.gamma, room)
            acc = model_run(full, model_next, pos, k)
            drafted = min(k, acc + 1)  # it drafts on until its first wrong token (or k)
            ms += v(drafted) + draft_ms * drafted
        else:
            acc = 0
            ms += v(0)
        rounds += 1
        pos += acc + 1
    return (len(full) - n_prompt) / ms * 1000, lookups / rounds


def ngram_policy(ctx):
    t = lookup(ctx, args.gamma, 3, 1)
    return ("lookup", t) if t else ("none", [])


def hybrid_policy(min_match, max_ngram=8):
    def pol(ctx):
        t, _, _ = frequent_continuation(ctx, args.gamma, max_ngram, min_match)
        return ("lookup", t) if t else ("model", [])
    return pol


policies = {"target-only": lambda ctx: ("none", []), "model": lambda ctx: ("model", []), "ngram": ngram_policy}
for m in (1, 2, 3, 4, 5, 6):
    policies[f"hybrid min_match={m}"] = hybrid_policy(m)
print(f"{'policy':<22} " + " ".join(f"{g:>8}" for g in bench.GROUPS) + "  lookup-share")
for name, pol in policies.items():
    by_group, shares = {}, []
    for p, n_prompt, full, model_next in cases:
        rate, share = simulate(pol, n_prompt, full, model_next)
        by_group.setdefault(p.group, []).append(rate)
        shares.append(share)
    print(f"{name:<22} " + " ".join(f"{statistics.median(by_group[g]):8.2f}" for g in bench.GROUPS)
          + f"  {statistics.mean(shares):.2f}", flush=True)
