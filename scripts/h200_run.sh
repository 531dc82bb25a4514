#!/usr/bin/env bash
# The H200 runs behind docs/benchmarks/h200.md, each a device-tool call of under 10 minutes, results under
# $OUT. Written for nvidia-h200-x2 (two GPUs: `--devices 0,1`, two benches side by side, one per GPU,
# each timing ours and torch.mm in one process); on one GPU set DEVICES=0.
#   here:       wheels of the dependencies the GPU host lacks (platformdirs) in .whl/, carried with the tree
#   on the GPU: bash scripts/h200_run.sh MODE, MODE one of
#     check     the GPU test suite, the correctness smoke (gpu_smoke.py), host overhead (dispatch_overhead.py)
#     tune-all  the suite, every scripts/classes/*.yaml and scripts/mlp_shapes.yaml, torch.mm a candidate,
#               into one DB -> $OUT/sm_90.json; resumable: RESUME=1 for every call after the first
#     classes   bench the suite and every class file through dispatch (BACKEND=triton: the kernels alone;
#               CLASS_FILES="scripts/untuned_shapes.yaml": shapes nobody tuned)
#     verify    GPU suite + large sizes, MLP block (first GPU); classes (last GPU)
#     mlp       scripts/mlp_step.py: the MLP block, eager and compiled
#     graph     kernel time in CUDA-graph replay vs torch and the roofline (scripts/graph_probe.py):
#               small, skinny (operands rotated past L2), misaligned
#     warmup    first call in a fresh process, cold vs after `tritonblas warmup` (scripts/warmup_check.py)
#     models    transparent mode's GPU tests, then the models' own problems (scripts/model_shapes.yaml)
#               tuned where configs/sm_90.json has no fresh winner (resumable: RESUME=1), the shipped file
#               with them -> $OUT/sm_90.json, and scripts/model_bench.py run with it (BUDGET, TUNE_TIMEOUT,
#               REPS, SETTLE)
#     fp8       the scaled_mm GPU tests, then scripts/classes/fp8.yaml tuned (torch._scaled_mm a candidate;
#               -> $OUT/fp8_sm_90.json) and benched against torch._scaled_mm through dispatch and the
#               kernels alone (BUDGET, TUNE_TIMEOUT)
# Then here: copy sm_90.json to configs/, `tritonblas db check --shapes scripts/shapes.yaml --file
# configs/sm_90.json`, commit, and update docs/benchmarks/h200.md from the JSON files.
MODES="check|tune-all|classes|verify|mlp|graph|warmup|fp8|models"
usage() { sed -n '2,/^MODES=/s/^# \{0,1\}//p' "$0"; echo "usage: bash scripts/h200_run.sh $MODES"; }
# The mode first: a typo fails here, before any install.
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if [[ -z "${1:-}" || "|$MODES|" != *"|$1|"* ]]; then echo "unknown mode '${1:-}'" >&2; usage >&2; exit 2; fi
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SHAPES=${SHAPES:-scripts/shapes.yaml} DEVICES=${DEVICES:-0,1}
LAST=${DEVICES##*,}  # the second GPU when there are two
if [ -z "${NO_WHEELS:-}" ]; then  # NO_WHEELS=1: a machine with the project installed (a dry run on CPU)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
# A database's -wal, -shm and -journal go with it: a new file next to an old WAL would replay that WAL.
empty_db() { rm -f "$1" "$1-wal" "$1-shm" "$1-journal"
  python3 -c "import sys; from tuning_db import TuningDB; TuningDB(sys.argv[1]).close()" "$1"; }
# A copy through SQLite (its backup API), not cp: commits still in the WAL (a tuner ended by `timeout`
# checkpoints nothing) are in the copy too.
copy_db() { rm -f "$2"; python3 -c "import sqlite3, sys; src, dst = sqlite3.connect(sys.argv[1]), \
sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close(); src.close()" "$1" "$2"; }
FIRST=${DEVICES%%,*}
case "${1:-}" in
  check)
    TRITONBLAS_TEST_GPU=1 timeout 300 python3 -m pytest -p no:cacheprovider -n 8 tests/test_gpu.py \
      tests/test_gpu_launch.py > "$OUT/gpu_tests.txt" 2>&1; tail -25 "$OUT/gpu_tests.txt"
    timeout 90 python3 scripts/gpu_smoke.py 2>&1 | tail -5
    TRITONBLAS_DB=/tmp/none.sqlite timeout 120 python3 scripts/dispatch_overhead.py --json "$OUT/overhead.json" \
      2>&1 | grep -v Warning | tail -9 | tee "$OUT/overhead.txt" ;;
  tune-all)  # one tuning run for the suite, every class file and the MLP block's GEMMs
    # (scripts/mlp_shapes.yaml; ~150 problems: more than one call at BUDGET=6 on two GPUs). The first
    # call starts from an empty DB; RESUME=1 goes on with
    # /tmp/tune.sqlite (while the machine stays warm) or with SEED_DB (an earlier call's $OUT/tune.sqlite
    # carried in the tree); tuned problems are skipped. Each call exports every fresh winner to
    # $OUT/sm_90.json, even when TUNE_TIMEOUT cut it short, and lists what the file still misses.
    if [ -n "${SEED_DB:-}" ]; then copy_db "$SEED_DB" /tmp/tune.sqlite
    elif [ -z "${RESUME:-}" ] || [ ! -f /tmp/tune.sqlite ]; then empty_db /tmp/tune.sqlite; fi
    all=(); for f in ${ALL_SHAPES:-scripts/shapes.yaml scripts/classes/*.yaml scripts/mlp_shapes.yaml}; do all+=(--shapes "$f"); done
    timeout "${TUNE_TIMEOUT:-540}" python3 -m tritonblas tune "${all[@]}" --db /tmp/tune.sqlite \
      --budget-s "${BUDGET:-6}" --devices "$DEVICES" > "$OUT/tune.txt" 2>&1
    tail -4 "$OUT/tune.txt"
    python3 -m tritonblas db export --db /tmp/tune.sqlite --arch "${ARCH:-sm_90}" -o "$OUT/sm_90.json"
    copy_db /tmp/tune.sqlite "$OUT/tune.sqlite"
    python3 -m tritonblas db check "${all[@]}" --file "$OUT/sm_90.json" 2>&1 | tail -3 ;;
  models)  # record (scripts/model_shapes.yaml, TRITONBLAS_RECORD), tune, ship, run
    TRITONBLAS_TEST_GPU=1 timeout 150 python3 -m pytest -p no:cacheprovider -q tests/test_gpu_transparent.py \
      2>&1 | tail -3
    if [ -z "${RESUME:-}" ] || [ ! -f /tmp/tune.sqlite ]; then
      empty_db /tmp/tune.sqlite  # the shipped rows first: what is fresh in them is not tuned again
      python3 -m tritonblas db import --file configs/sm_90.json --db /tmp/tune.sqlite | tail -1
    fi
    timeout "${TUNE_TIMEOUT:-300}" python3 -m tritonblas tune --shapes scripts/model_shapes.yaml \
      --db /tmp/tune.sqlite --budget-s "${BUDGET:-1.5}" > "$OUT/tune.txt" 2>&1
    tail -2 "$OUT/tune.txt"
    python3 -m tritonblas db export --db /tmp/tune.sqlite --arch sm_90 -o "$OUT/sm_90.json"
    python3 -m tritonblas db check --shapes scripts/model_shapes.yaml --file "$OUT/sm_90.json" 2>&1 | tail -1
    cp "$OUT/sm_90.json" configs/sm_90.json  # (this copy of the tree) the models run with it
    timeout "${BENCH_TIMEOUT:-240}" python3 scripts/model_bench.py --quick --reps "${REPS:-7}" \
      --settle "${SETTLE:-2}" --json "$OUT/models.json" 2>&1 | grep -v Warning | tail -28 ;;
  classes)  # the suite and every class file through dispatch with the shipped file and an empty
    # user DB, half the files on each GPU (BACKEND=triton|torch restricts our side; one JSON per GPU)
    files=(${CLASS_FILES:-scripts/shapes.yaml scripts/classes/*.yaml}); half=$(( (${#files[@]} + 1) / 2 ))
    args() { for f in "$@"; do printf -- '--shapes\n%s\n' "$f"; done; }
    bench_files() {  # bench_files GPU NAME FILE...
      local gpu=$1 name=$2; shift 2; [ $# -gt 0 ] || return 0  # one file: the second half is empty
      empty_db "/tmp/empty$gpu.sqlite"; mapfile -t a < <(args "$@")
      CUDA_VISIBLE_DEVICES=$gpu timeout 540 python3 -m tritonblas bench "${a[@]}" --db "/tmp/empty$gpu.sqlite" \
        ${BACKEND:+--backend "$BACKEND"} --json "$OUT/$name.json" > "/tmp/$name.txt" 2>&1
      echo "== $name"; tail -3 "/tmp/$name.txt"
    }
    first_half="classes_a${BACKEND:+_$BACKEND}" second_half="classes_b${BACKEND:+_$BACKEND}"
    bench_files "$FIRST" "$first_half" "${files[@]:0:half}" &
    [ "$LAST" != "$FIRST" ] || wait
    bench_files "$LAST" "$second_half" "${files[@]:half}"; wait
    # The tables in one file: at most 8 files come back from $OUT, and a call often runs several modes.
    for name in "$first_half" "$second_half"; do
      { echo "== $name"; cat "/tmp/$name.txt"; } >> "$OUT/tables.txt"
    done ;;
  verify)  # the GPU suite (large sizes and threads included) then the MLP block on the first GPU, while
    # the second benches the suite and every class file through dispatch (shipped file, empty user DB)
    ( CUDA_VISIBLE_DEVICES=$FIRST TRITONBLAS_TEST_GPU=1 timeout 330 python3 -m pytest -p no:cacheprovider -n 8 \
        tests/test_gpu.py tests/test_gpu_launch.py tests/test_gpu_large.py > "$OUT/gpu_tests.txt" 2>&1
      tail -6 "$OUT/gpu_tests.txt"
      DEVICES=$FIRST bash "$0" mlp > /dev/null 2>&1; tail -8 "$OUT/mlp.txt" ) &
    CLASS_FILES="${CLASS_FILES:-scripts/shapes.yaml scripts/classes/*.yaml}" DEVICES=$LAST bash "$0" classes
    wait ;;
  mlp)  # the Llama MLP block forward + backward, ours vs F.linear, eager and compiled
    CUDA_VISIBLE_DEVICES=$FIRST TRITONBLAS_DB=/tmp/none.sqlite timeout 540 python3 scripts/mlp_step.py \
      ${MLP_ARGS:-} ${BACKEND:+--backend "$BACKEND"} --json "$OUT/mlp${BACKEND:+_$BACKEND}.json" 2>&1 \
      | tee "$OUT/mlp${BACKEND:+_$BACKEND}.txt" ;;
  graph)  # graph-replay tables per class file (BACKEND=dispatch: what dispatch runs)
    for f in ${GRAPH_CLASSES:-small skinny misaligned}; do
      rotate=0; [ "$f" = skinny ] && rotate=256  # skinny's target: no call finds its operands in L2
      CUDA_VISIBLE_DEVICES=$FIRST timeout 280 python3 scripts/graph_probe.py --shapes "scripts/classes/$f.yaml" \
        --rotate-mb "$rotate" --backend "${BACKEND:-triton}" --json "$OUT/graph-$f.json" 2>&1 \
        | grep -v Warning | tee "/tmp/graph-$f.txt"
      { echo "== graph-$f"; cat "/tmp/graph-$f.txt"; } >> "$OUT/tables.txt"
    done ;;
  fp8)  # one tuning run of the fp8 class (every candidate checked against fp64 first), its two
    # benches, then the scaled_mm GPU tests
    empty_db /tmp/fp8.sqlite
    timeout "${TUNE_TIMEOUT:-240}" python3 -m tritonblas tune --shapes scripts/classes/fp8.yaml --db /tmp/fp8.sqlite \
      --budget-s "${BUDGET:-8}" --devices "$FIRST" > "$OUT/fp8_tune.txt" 2>&1; tail -3 "$OUT/fp8_tune.txt"
    python3 -m tritonblas db export --db /tmp/fp8.sqlite --arch "${ARCH:-sm_90}" -o "$OUT/fp8_sm_90.json"
    for backend in dispatch triton; do
      CUDA_VISIBLE_DEVICES=$FIRST timeout "${BENCH_TIMEOUT:-150}" python3 -m tritonblas bench \
        --shapes scripts/classes/fp8.yaml --db /tmp/fp8.sqlite $([ "$backend" = triton ] && echo --backend triton) \
        --json "$OUT/fp8_$backend.json" > "/tmp/fp8_$backend.txt" 2>&1
      { echo "== fp8 $backend"; cat "/tmp/fp8_$backend.txt"; } >> "$OUT/tables.txt"; tail -2 "/tmp/fp8_$backend.txt"
    done
    TRITONBLAS_TEST_GPU=1 timeout "${TEST_TIMEOUT:-240}" python3 -m pytest -p no:cacheprovider -n 8 \
      tests/test_gpu_scaled.py > "$OUT/gpu_scaled.txt" 2>&1; tail -4 "$OUT/gpu_scaled.txt" ;;
  warmup)  # the first call of a shape in a fresh process, cold and after tritonblas.warmup;
    # bytecode compiled first, as `pip install` does (the wheels above are unpacked with --no-compile)
    # (and triton's: the device image has no .pyc for it, 44 modules compiled from source in every
    # process, 0.15 s; PYTHONPYCACHEPREFIX keeps ours beside, its folder stays untouched)
    export PYTHONPYCACHEPREFIX=/tmp/pycache
    python3 -m compileall -q /tmp/site tritonblas tuning_db "$(python3 -c 'import os, triton; \
print(os.path.dirname(triton.__file__))')" > /dev/null
    for backend in ${WARM_BACKENDS:-triton dispatch}; do
      CUDA_VISIBLE_DEVICES=$FIRST timeout 270 python3 scripts/warmup_check.py --shapes "$SHAPES" \
        --limit "${LIMIT:-8}" --backend "$backend" --json "$OUT/warmup-$backend.json" 2>&1 \
        | grep -v Warning | tee "$OUT/warmup-$backend.txt"
    done ;;
esac
