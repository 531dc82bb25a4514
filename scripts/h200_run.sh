#!/usr/bin/env bash
# The GPU work of issues 2, 4, 5 and 6 in device-tool calls of under 10 minutes each, results under $OUT.
# Written for nvidia-h200-x2 (two GPUs: the two-GPU test, `--devices 0,1`, and two benches side by side,
# one per GPU, each timing ours and torch.mm in one process); on one GPU set DEVICES=0.
#   here:       bash ../shared/device/prepare-wheels.sh platformdirs      (once; carry [".whl"])
#   on the GPU: bash scripts/h200_run.sh check    GPU test suite, smoke, host overhead
#               bash scripts/h200_run.sh final    check, then the heuristic alone on both shape files
#               bash scripts/h200_run.sh probe    ragged-size probe, a TMA launch from another thread
#               bash scripts/h200_run.sh overhead host overhead of a dispatch hit
#               bash scripts/h200_run.sh compile  compile throughput by thread count (scripts/compile_probe.py)
#               bash scripts/h200_run.sh quality  tuned vs exhaustive search, tuning time (issue 4)
#               bash scripts/h200_run.sh heuristic the heuristic alone, untuned shapes, a tuning run's rows
#               bash scripts/h200_run.sh tune     tune scripts/shapes.yaml -> $OUT/sm_90.json, then bench
#                                                 it as the shipped file, the untuned shapes, and the
#                                                 heuristic alone (a copy of the tree without the file)
#               bash scripts/h200_run.sh tune-all the suite and every scripts/classes/*.yaml, torch.mm a
#                                                 candidate, into one DB -> $OUT/sm_90.json (issue 17);
#                                                 resumable: RESUME=1 for every call after the first
#               bash scripts/h200_run.sh classes  bench the suite and every class file through dispatch
#                                                 (BACKEND=triton: the kernels alone)
#               bash scripts/h200_run.sh verify   GPU suite + large sizes, MLP block (GPU 0); classes (GPU 1)
#               bash scripts/h200_run.sh mlp      scripts/mlp_step.py: the MLP block, eager and compiled
#               bash scripts/h200_run.sh ab       tests/kernel_ab.py on base.tar's tree and on this one
#               bash scripts/h200_run.sh graph    kernel time in CUDA-graph replay vs torch and the roofline:
#                                                 small, skinny (operands rotated past L2), misaligned
#               bash scripts/h200_run.sh warmup   first call in a fresh process, cold vs after `tritonblas
#                                                 warmup` (scripts/warmup_check.py; target <= 0.5 s)
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
# A database's -wal, -shm and -journal go with it: a new file next to an old WAL would replay that WAL.
empty_db() { rm -f "$1" "$1-wal" "$1-shm" "$1-journal"
  python3 -c "import sys; from tuning_db import TuningDB; TuningDB(sys.argv[1]).close()" "$1"; }
# A copy through SQLite (its backup API), not cp: commits still in the WAL (a tuner ended by `timeout`
# checkpoints nothing) are in the copy too.
copy_db() { rm -f "$2"; python3 -c "import sqlite3, sys; src, dst = sqlite3.connect(sys.argv[1]), \
sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close(); src.close()" "$1" "$2"; }
bench() {  # bench GPU SHAPES NAME: through dispatch with an empty user DB (shipped file, neighbours,
  empty_db "/tmp/empty$1.sqlite"  # heuristic)
  CUDA_VISIBLE_DEVICES=$1 timeout 300 python3 -m tritonblas bench --shapes "$2" --db "/tmp/empty$1.sqlite" \
    --json "$OUT/$3.json" > "/tmp/$3.txt" 2>&1
  { echo "== $3"; tail -60 "/tmp/$3.txt"; } >> "$OUT/benches.txt"; echo "== $3"; tail -2 "/tmp/$3.txt"
}  # (at most 8 files come back from $OUT: the tables share one)
bench_heuristic() {  # bench_heuristic GPU [SHAPES NAME]: no shipped file (a copy of the tree): the heuristic
  local tree="/tmp/noship$1"  # alone, since the user DB is empty too
  rm -rf "$tree" && cp -r "$PWD" "$tree" && rm -f "$tree/configs/${ARCH:-sm_90}.json"
  (cd "$tree" && PYTHONPATH="/tmp/site:$tree" bench "$1" "${2:-$SHAPES}" "${3:-bench_heuristic}")
}
FIRST=${DEVICES%%,*}
case "${1:-}" in
  check)
    TRITONBLAS_TEST_GPU=1 timeout 300 python3 -m pytest -p no:cacheprovider -n 8 tests/test_gpu.py \
      > "$OUT/gpu_tests.txt" 2>&1; tail -25 "$OUT/gpu_tests.txt"
    timeout 90 python3 scripts/gpu_smoke.py 2>&1 | tail -5
    TRITONBLAS_DB=/tmp/none.sqlite timeout 90 python3 scripts/dispatch_overhead.py 2>&1 | tail -9 \
      | tee "$OUT/overhead.txt" ;;
  final)  # the GPU suite and host overhead, then the heuristic alone on the tuned and the untuned shapes
    bash "$0" check
    bench_heuristic "$FIRST" &
    [ "$LAST" != "$FIRST" ] || wait
    bench_heuristic "$LAST" "$UNTUNED" bench_untuned_heuristic; wait ;;
  probe)  # what makes ragged sizes slow; TMA plans launched from a fresh thread
    CUDA_VISIBLE_DEVICES=$FIRST TRITONBLAS_TEST_GPU=1 timeout 90 python3 -m pytest -q -p no:cacheprovider \
      tests/test_gpu.py -k thread 2>&1 | tail -2
    CUDA_VISIBLE_DEVICES=$FIRST timeout 150 python3 scripts/ragged_probe.py --json "$OUT/ragged.json" ;;
  compile)  # compile throughput of the tuner's prepare by thread count, each on its own empty cache
    CUDA_VISIBLE_DEVICES=$FIRST timeout 240 python3 scripts/compile_probe.py --workers "${WORKERS:-1,4,16}" \
      2>&1 | tee "$OUT/compile_probe.txt" ;;
  overhead)  # host overhead of a dispatch hit (run alone: it is host-bound)
    CUDA_VISIBLE_DEVICES=$FIRST TRITONBLAS_DB=/tmp/none.sqlite timeout 90 python3 scripts/dispatch_overhead.py \
      2>&1 | tail -9 | tee "$OUT/overhead.txt" ;;
  tune)  # tune on every GPU; then the shipped file, the untuned shapes and the heuristic alone
    empty_db /tmp/tune.sqlite
    timeout "${TUNE_TIMEOUT:-360}" python3 -m tritonblas tune --shapes "$SHAPES" --db /tmp/tune.sqlite \
      --budget-s "${BUDGET:-10}" --devices "$DEVICES" --export "$OUT/sm_90.json" > "$OUT/tune.txt" 2>&1
    tail -4 "$OUT/tune.txt"
    cp "$OUT/sm_90.json" "configs/${ARCH:-sm_90}.json" && copy_db /tmp/tune.sqlite "$OUT/tune.sqlite"
    bench "$FIRST" "$SHAPES" bench_shipped &
    [ "$LAST" != "$FIRST" ] || wait
    bench "$LAST" "$UNTUNED" bench_untuned
    bench_heuristic "$LAST"
    wait ;;
  tune-all)  # issue 17: one tuning run for the suite, every class file and the MLP block's GEMMs
    # (scripts/mlp_shapes.yaml; ~150 problems: more than one call at BUDGET=6 on two GPUs). The first call starts from an empty DB; RESUME=1 goes on with
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
  classes)  # issue 17: the suite and every class file through dispatch with the shipped file and an empty
    # user DB, half the files on each GPU (BACKEND=triton|torch restricts our side; one JSON per GPU)
    files=(${CLASS_FILES:-scripts/shapes.yaml scripts/classes/*.yaml}); half=$(( (${#files[@]} + 1) / 2 ))
    args() { for f in "$@"; do printf -- '--shapes\n%s\n' "$f"; done; }
    bench_files() {  # bench_files GPU NAME FILE...
      local gpu=$1 name=$2; shift 2; empty_db "/tmp/empty$gpu.sqlite"; mapfile -t a < <(args "$@")
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
        tests/test_gpu.py tests/test_gpu_large.py > "$OUT/gpu_tests.txt" 2>&1; tail -6 "$OUT/gpu_tests.txt"
      DEVICES=$FIRST bash "$0" mlp > /dev/null 2>&1; tail -8 "$OUT/mlp.txt" ) &
    CLASS_FILES="${CLASS_FILES:-scripts/shapes.yaml scripts/classes/*.yaml}" DEVICES=$LAST bash "$0" classes
    wait ;;
  mlp)  # issue 17: the Llama MLP block forward + backward, ours vs F.linear, eager and compiled
    CUDA_VISIBLE_DEVICES=$FIRST TRITONBLAS_DB=/tmp/none.sqlite timeout 540 python3 scripts/mlp_step.py \
      ${MLP_ARGS:-} ${BACKEND:+--backend "$BACKEND"} --json "$OUT/mlp${BACKEND:+_$BACKEND}.json" 2>&1 \
      | tee "$OUT/mlp${BACKEND:+_$BACKEND}.txt" ;;
  ab)  # kernel A/B: tests/kernel_ab.py (this tree's cases) against a base tree's package and this one's;
    # the base comes as a tarball made here: `git archive main -o base.tar` (ignored: carry ["base.tar"])
    rm -rf /tmp/base && mkdir -p /tmp/base && tar -xf "${BASE_TAR:-base.tar}" -C /tmp/base || exit 1
    for tree in /tmp/base "$PWD"; do
      echo "== $tree"
      CUDA_VISIBLE_DEVICES=$FIRST PYTHONPATH="/tmp/site:$tree" timeout 250 python3 tests/kernel_ab.py ${AB_ARGS:-}
    done 2>&1 | grep -v Warning | tee "$OUT/kernel_ab.txt" ;;
  graph)  # issues 15 and 16: graph-replay tables per class file (BACKEND=dispatch: what dispatch runs)
    for f in ${GRAPH_CLASSES:-small skinny misaligned}; do
      rotate=0; [ "$f" = skinny ] && rotate=256  # skinny's target: no call finds its operands in L2
      CUDA_VISIBLE_DEVICES=$FIRST timeout 280 python3 scripts/graph_probe.py --shapes "scripts/classes/$f.yaml" \
        --rotate-mb "$rotate" --backend "${BACKEND:-triton}" --json "$OUT/graph-$f.json" 2>&1 \
        | grep -v Warning | tee "/tmp/graph-$f.txt"
      { echo "== graph-$f"; cat "/tmp/graph-$f.txt"; } >> "$OUT/tables.txt"
    done ;;
  warmup)  # issue 18: the first call of a shape in a fresh process, cold and after tritonblas.warmup;
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
  heuristic)  # the heuristic alone (a copy of the tree without the shipped file) and the untuned shapes,
    # side by side; then a tuning run kept for its measurements (no export), for fitting the model
    bench_heuristic "$FIRST" &
    [ "$LAST" != "$FIRST" ] || wait
    bench "$LAST" "$UNTUNED" bench_untuned; wait
    empty_db /tmp/tune.sqlite
    timeout "${TUNE_TIMEOUT:-360}" python3 -m tritonblas tune --shapes "$SHAPES" --db /tmp/tune.sqlite \
      --budget-s "${BUDGET:-10}" --devices "$DEVICES" > "$OUT/tune.txt" 2>&1
    tail -4 "$OUT/tune.txt"; copy_db /tmp/tune.sqlite "$OUT/tune.sqlite" ;;
  quality)  # issue 4: tuned winner vs an exhaustive search of the same space, and tuning time; the
    # QUALITY shapes are dealt round-robin to the DEVICES, one tune_quality.py process per GPU
    IFS=, read -ra gpus <<< "$DEVICES"; IFS=, read -ra qshapes <<< "${QUALITY:-1024x1024x1024,256x256x16384,4096x1024x512,127x4096x4096}"
    for i in "${!gpus[@]}"; do
      mine=""; for j in "${!qshapes[@]}"; do (( j % ${#gpus[@]} == i )) && mine+="${qshapes[j]},"; done
      [ -n "$mine" ] || continue
      ( CUDA_VISIBLE_DEVICES=${gpus[i]} TRITONBLAS_DB=/tmp/none.sqlite timeout "${QUALITY_TIMEOUT:-480}" \
        python3 scripts/tune_quality.py --budget "${QUALITY_BUDGET:-5}" --shapes "${mine%,}" --json "$OUT/quality${gpus[i]}.json" \
        > "$OUT/quality${gpus[i]}.txt" 2>&1; tail -12 "$OUT/quality${gpus[i]}.txt" ) &
    done; wait ;;
  *) echo "usage: bash scripts/h200_run.sh check|final|probe|compile|overhead|quality|heuristic|tune|tune-all|classes|verify|mlp|warmup" >&2
     exit 2 ;;
esac
