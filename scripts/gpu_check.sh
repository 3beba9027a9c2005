#!/usr/bin/env bash
# The ExLlamaV2 GPU check, in one call on a fresh GPU machine with no network.
#
#   scripts/gpu_check.sh --prepare   # here, with network: wheels + tokenizer.json into .gpu_wheels/
#   scripts/gpu_check.sh             # on the GPU machine (carry .gpu_wheels); about 5-7 minutes:
#                                    # the exllamav2 extension compiles for 3-4 min on 16 cores
#
# Writes gpu_check.json, bench output and logs under $OUT (or /tmp/gpu_check); exits non-zero
# on any mismatch. .gpu_wheels/ must be ignored by git (.gitignore or .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu_wheels
OUTDIR=${OUT:-/tmp/gpu_check}

if [[ ${1:-} == --prepare ]]; then
  PY=${PY:-.venv/bin/python}
  # The GPU image has torch (CUDA), tokenizers, safetensors, numpy, pandas, rich, regex, pygments,
  # pillow and ninja; these are what exllamav2 0.3.2 and draftline need besides (Python 3.12).
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$WHEELS" \
    exllamav2==0.3.2 fastparquet cramjam websockets pygls==2.1.1 lsprotocol==2025.0.0 cattrs \
    gguf==0.19.0 watchdog pathspec
  "$PY" scripts/gpu_check.py --export-tokenizer "$WHEELS/tokenizer.json"
  du -sh "$WHEELS"
  exit 0
fi

PY=${PY:-python3}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
export MAX_JOBS=${MAX_JOBS:-$(nproc)}                       # parallel nvcc jobs for the JIT build
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}    # H100/H200 only: a third of the build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl
export PYTHONPATH=/tmp/site:$PWD

echo "== building the exllamav2 extension (first import)" >&2
start=$(date +%s)
"$PY" -c "import exllamav2, torch; print('exllamav2', exllamav2.__version__, 'torch', torch.__version__)" \
  >"$OUTDIR/build.log" 2>&1 || { tail -50 "$OUTDIR/build.log"; exit 1; }
echo "== extension ready in $(( $(date +%s) - start )) s" >&2

status=0
"$PY" scripts/gpu_check.py --tokenizer-json "$WHEELS/tokenizer.json" --model-dir /tmp/random-llama \
  --summary "$OUTDIR/gpu_check.json" || status=1

# The bench, briefly, on the random model, if the bench exists yet (figures: speed only; a random
# model's drafts say nothing about acceptance on real code). BENCH_ARGS adds options.
if [[ -f lsp_server/bench.py ]]; then
  for backend in exllamav2 torch; do
    echo "== bench --backend $backend" >&2
    timeout 150 "$PY" -m lsp_server.cli bench --model /tmp/random-llama --backend "$backend" ${BENCH_ARGS:-} \
      >"$OUTDIR/bench_$backend.txt" 2>&1 || { echo "bench ($backend) failed" >&2; status=1; }
    tail -20 "$OUTDIR/bench_$backend.txt"
  done
fi
echo "== gpu_check: $([[ $status == 0 ]] && echo PASS || echo FAIL)" >&2
exit $status
