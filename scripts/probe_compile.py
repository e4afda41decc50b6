"""Time the compiled target's passes against eager ones, interleaved in one process.

    python scripts/probe_compile.py [--model NAME] [--cache-len L ...]

For each static-cache length L: builds a CompiledTarget with passes of 1 and 8 positions (a
minute or two each on 2 CPU cores), prefills 200 random tokens into it and into a dynamic cache,
then times 9 rounds of (compiled pass, eager pass) for 1 and 8 positions and prints the medians,
their ratio and the largest logit difference (bf16 rounding). Used to choose
specchat.runtimes.compiled.DEFAULT_MAX_CACHE_LEN (issue 14).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specchat.runtimes import loading  # noqa: E402
from specchat.runtimes.compiled import CompiledTarget  # noqa: E402
from specchat.runtimes.registry import load_registry  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--model", help="models.yaml name (default: the default target)")
parser.add_argument("--cache-len", type=int, nargs="+", default=[1024, 2048, 4096])
args = parser.parse_args()
registry = load_registry()
path = loading.ensure_local(registry.resolve(args.model or registry.default_target))
torch.manual_seed(0)
ids = torch.randint(100, 10000, (400,)).tolist()
model = loading.load_model(path, dtype=torch.bfloat16)
for length in args.cache_len:
    compiled = CompiledTarget(model, max_cache_len=length, buckets=(1, 8))
    t0 = time.perf_counter()
    compiled.warm_up()
    print(f"cache {length}: compiled in {time.perf_counter() - t0:.0f} s", flush=True)
    with torch.inference_mode():
        compiled.reset()
        compiled.forward(ids[:200], logits_to_keep=1)
        cache = DynamicCache(config=model.config)
        model(input_ids=torch.tensor([ids[:200]]), cache=cache, use_cache=True, logits_to_keep=1)
        for n in (1, 8):
            fast, slow = [], []
            for _ in range(9):
                t = time.perf_counter()
                a = compiled.forward(ids[200 : 200 + n], logits_to_keep=n)
                fast.append(time.perf_counter() - t)
                compiled.cache.crop(-n)
                t = time.perf_counter()
                b = model(input_ids=torch.tensor([ids[200 : 200 + n]]), cache=cache, use_cache=True, logits_to_keep=n).logits[0]
                slow.append(time.perf_counter() - t)
                cache.crop(-n)
            f, s = statistics.median(fast), statistics.median(slow)
            print(f"cache {length}, {n}-position pass: compiled {f * 1000:.0f} ms, eager {s * 1000:.0f} ms, "
                  f"{s / f:.2f}x, largest logit difference {(a.float() - b.float()).abs().max():.3g}", flush=True)
    del compiled
