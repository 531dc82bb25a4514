#!/usr/bin/env bash
# The GPU work of issues 2, 4 and 6 in device-tool calls of under 10 minutes each, results under $OUT.
#   here:       bash ../shared/device/prepare-wheels.sh platformdirs      (once; carry [".whl"])
#   on the GPU: bash scripts/h200_run.sh check    GPU test suite, smoke, host overhead, heuristic bench
#               bash scripts/h200_run.sh tune     tune scripts/shapes.yaml -> $OUT/sm_90.json, then bench
#                                                 it as the shipped file, and the untuned shapes
#               bash scripts/h200_run.sh quality  tuned vs exhaustive search on 4 problems, tuning time
# Then here: copy sm_90.json to configs/, `tritonblas db check --shapes scripts/shapes.yaml --file
# configs/sm_90.json`, commit, and fill docs/benchmarks/h200.md from the JSON files.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SHAPES=${SHAPES:-scripts/shapes.yaml} UNTUNED=${UNTUNED:-scripts/untuned_shapes.yaml}
if [ -z "${NO_WHEELS:-}" ]; then  # NO_WHEELS=1: a machine with the project installed (a dry run on CPU)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
empty_db() { rm -f "$1"; python3 -c "import sys; from tuning_db import TuningDB; TuningDB(sys.argv[1]).close()" "$1"; }
bench() {  # bench SHAPES NAME: through dispatch with an empty user DB (shipped file, neighbours, heuristic)
  empty_db /tmp/empty.sqlite
  timeout 240 python3 -m tritonblas bench --shapes "$1" --db /tmp/empty.sqlite --json "$OUT/$2.json" \
    2>&1 | tail -55 > "$OUT/$2.txt"
  tail -3 "$OUT/$2.txt"
}
case "${1:-}" in
  check)
    TRITONBLAS_TEST_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 \
      | tail -25 > "$OUT/gpu_tests.txt"; tail -3 "$OUT/gpu_tests.txt"
    timeout 60 python3 scripts/gpu_smoke.py 2>&1 | tail -5
    TRITONBLAS_DB=/tmp/none.sqlite timeout 60 python3 scripts/dispatch_overhead.py 2>&1 | tail -9 \
      | tee "$OUT/overhead.txt"
    rm -f "configs/${ARCH:-sm_90}.json"   # heuristic only: no shipped file
    bench "$SHAPES" bench_heuristic ;;
  tune)
    empty_db /tmp/tune.sqlite
    timeout 420 python3 -m tritonblas tune --shapes "$SHAPES" --db /tmp/tune.sqlite --budget-s 3 \
      --export "$OUT/sm_90.json" 2>&1 | tail -60 > "$OUT/tune.txt"; tail -4 "$OUT/tune.txt"
    cp "$OUT/sm_90.json" "configs/${ARCH:-sm_90}.json" && cp /tmp/tune.sqlite "$OUT/tune.sqlite"
    bench "$SHAPES" bench_shipped
    bench "$UNTUNED" bench_untuned ;;
  quality)  # issue 4: tuned winner vs an exhaustive search of the same space, and tuning time
    TRITONBLAS_DB=/tmp/none.sqlite timeout 560 python3 scripts/tune_quality.py \
      --shapes 1024x1024x1024,256x256x16384,4096x1024x512,127x4096x4096 --json "$OUT/quality.json" 2>&1 \
      | tail -20 | tee "$OUT/quality.txt" ;;
  *) echo "usage: bash scripts/h200_run.sh check|tune|quality" >&2; exit 2 ;;
esac
