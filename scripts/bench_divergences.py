"""For each bench reply that differs from target-only: the target's top-2 logits at the first
difference (one full-sequence forward pass over prompt + common prefix).

    python scripts/bench_divergences.py [assets/bench.json]

A gap of a few bf16 ulps means a near-tie that different pass shapes round differently.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import json

import torch

from specchat.commands.bench import runner as bench
from specchat.service import ChatService

d = json.load(open(sys.argv[1] if len(sys.argv) > 1 else 'assets/bench.json'))
runs = d['runs']
base = {(r['prompt'], r['repeat']): r for r in runs if r['config'] == 'specchat none'}
prompts = {p.id: p for p in bench.load_prompts()}
svc = ChatService()
svc.load()
m = svc.engine.target.model
for r in runs:
    if r['identical'] or r['config'] == 'specchat none':
        continue
    b, t = base[(r['prompt'], r['repeat'])]['token_ids'], r['token_ids']
    i = next((k for k, (x, y) in enumerate(zip(b, t)) if x != y), min(len(b), len(t)))
    ids = svc.encode_chat([], prompts[r['prompt']].message, 64)[0] + b[:i]
    with torch.inference_mode():
        logits = m(torch.tensor([ids])).logits[0, -1].float()
    top = torch.topk(logits, 2)
    print(f"{r['config']:<32} {r['prompt']:<22} first diff at {i}: "
          f"target-only {b[i] if i < len(b) else None} vs {t[i] if i < len(t) else None}; "
          f"top-2 logits {top.values[0]:.4f} {top.values[1]:.4f} gap {float(top.values[0]-top.values[1]):.4f} ids {top.indices.tolist()}")
