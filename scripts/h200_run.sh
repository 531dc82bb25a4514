#!/usr/bin/env bash
# The GPU work of issues 2, 4, 5 and 6 in device-tool calls of under 10 minutes each, results under $OUT.
# Written for nvidia-h200-x2 (two GPUs: the two-GPU test, `--devices 0,1`, and two benches side by side,
# one per GPU, each timing ours and torch.mm in one process); on one GPU set DEVICES=0.
#   here:       bash ../shared/device/prepare-wheels.sh platformdirs      (once; carry [".whl"])
#   on the GPU: bash scripts/h200_run.sh check    GPU test suite, smoke, host overhead
#               bash scripts/h200_run.sh tune     tune scripts/shapes.yaml -> $OUT/sm_90.json, then bench
#                                                 it as the shipped file, and the untuned shapes
#               bash scripts/h200_run.sh quality  tuned vs exhaustive search, tuning time; and the
#                                                 heuristic alone (no shipped file) on the shapes file
# Then here: copy sm_90.json to configs/, `tritonblas db check --shapes scripts/shapes.yaml --file
# configs/sm_90.json`, commit, and fill docs/benchmarks/h200.md from the JSON files.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SHAPES=${SHAPES:-scripts/shapes.yaml} UNTUNED=${UNTUNED:-scripts/untuned_shapes.yaml} DEVICES=${DEVICES:-0,1}
LAST=${DEVICES##*,}  # the second GPU when there are two
if [ -z "${NO_WHEELS:-}" ]; then  # NO_WHEELS=1: a machine with the project installed (a dry run on CPU)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
empty_db() { rm -f "$1"; python3 -c "import sys; from tuning_db import TuningDB; TuningDB(sys.argv[1]).close()" "$1"; }
bench() {  # bench GPU SHAPES NAME: through dispatch with an empty user DB (shipped file, neighbours,
  empty_db "/tmp/empty$1.sqlite"  # heuristic)
  CUDA_VISIBLE_DEVICES=$1 timeout 300 python3 -m tritonblas bench --shapes "$2" --db "/tmp/empty$1.sqlite" \
    --json "$OUT/$3.json" > "$OUT/$3.txt" 2>&1
  echo "== $3"; tail -3 "$OUT/$3.txt"
}
case "${1:-}" in
  check)
    TRITONBLAS_TEST_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu.py \
      > "$OUT/gpu_tests.txt" 2>&1; tail -25 "$OUT/gpu_tests.txt"
    timeout 90 python3 scripts/gpu_smoke.py 2>&1 | tail -5
    TRITONBLAS_DB=/tmp/none.sqlite timeout 90 python3 scripts/dispatch_overhead.py 2>&1 | tail -9 \
      | tee "$OUT/overhead.txt" ;;
  tune)
    empty_db /tmp/tune.sqlite
    timeout 330 python3 -m tritonblas tune --shapes "$SHAPES" --db /tmp/tune.sqlite --budget-s 3 \
      --devices "$DEVICES" --export "$OUT/sm_90.json" > "$OUT/tune.txt" 2>&1; tail -4 "$OUT/tune.txt"
    cp "$OUT/sm_90.json" "configs/${ARCH:-sm_90}.json" && cp /tmp/tune.sqlite "$OUT/tune.sqlite"
    bench "${DEVICES%%,*}" "$SHAPES" bench_shipped &
    [ "$LAST" != "${DEVICES%%,*}" ] || wait
    bench "$LAST" "$UNTUNED" bench_untuned; wait ;;
  quality)  # issue 4: tuned winner vs an exhaustive search of the same space, and tuning time
    rm -f "configs/${ARCH:-sm_90}.json"   # heuristic only: no shipped file
    bench "$LAST" "$SHAPES" bench_heuristic > "$OUT/bench_heuristic.log" 2>&1 &
    [ "$LAST" != "${DEVICES%%,*}" ] || wait
    CUDA_VISIBLE_DEVICES=${DEVICES%%,*} TRITONBLAS_DB=/tmp/none.sqlite timeout 480 \
      python3 scripts/tune_quality.py --shapes "${QUALITY:-1024x1024x1024,256x256x16384,4096x1024x512,127x4096x4096}" \
      --json "$OUT/quality.json" > "$OUT/quality.txt" 2>&1; tail -20 "$OUT/quality.txt"
    wait; cat "$OUT/bench_heuristic.log" ;;
  *) echo "usage: bash scripts/h200_run.sh check|tune|quality" >&2; exit 2 ;;
esac
