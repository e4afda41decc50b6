"""Time the target's forward passes in bf16 and fp32 on this machine: one decode step and verify
passes of 5 and 9 positions after a 200-token cache, and a 100-token prefill (median of 3).

    python scripts/probe_dtype.py [MODEL]   # default: the registry's default target

On a CPU without native bf16 the multi-token passes are much slower in bf16 (issue 14).
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specchat.runtimes import loading  # noqa: E402
from specchat.runtimes.registry import load_registry  # noqa: E402

registry = load_registry()
entry = registry.resolve(sys.argv[1] if len(sys.argv) > 1 else registry.default_target)
path = loading.ensure_local(entry)
torch.manual_seed(0)
ids = torch.randint(100, 10000, (1, 300))
for dtype in (torch.bfloat16, torch.float32):
    m = loading.load_model(path, dtype=dtype)
    with torch.inference_mode():
        def run(model, n_prefix, n_new, reps=3):
            ts = []
            for _ in range(reps):
                c = DynamicCache(config=model.config)
                if n_prefix:
                    model(input_ids=ids[:, :n_prefix], cache=c, use_cache=True, logits_to_keep=1)
                t = time.perf_counter()
                model(input_ids=ids[:, n_prefix:n_prefix + n_new], cache=c, use_cache=True, logits_to_keep=n_new)
                ts.append((time.perf_counter() - t) * 1000)
            return statistics.median(ts)
        run(m, 0, 8, 1)
        print(dtype, "step1 %.0f ms, verify5 %.0f ms, verify9 %.0f ms, prefill100 %.0f ms"
              % (run(m, 200, 1), run(m, 200, 5), run(m, 200, 9), run(m, 0, 100, 2)), flush=True)
    del m
