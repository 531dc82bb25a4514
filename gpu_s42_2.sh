#!/usr/bin/env bash
# session 42, call 2 (one H200, triton 3.6.0): GPU tests on the prepared copies, benches through dispatch
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD XDG_CACHE_HOME=/tmp/xc PYTHONUNBUFFERED=1
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT
TRITONBLAS_TEST_GPU=1 timeout 250 python3 -m pytest -p no:cacheprovider -q -n 8 tests/test_gpu.py tests/test_gpu_launch.py \
  tests/test_gpu_scaled.py tests/test_gpu_transparent.py > $OUT/gpu_tests.txt 2>&1; tail -4 $OUT/gpu_tests.txt
b() { local name=$1; shift; rm -f /tmp/e_$name.sqlite; timeout ${T:-120} python3 -m tritonblas bench "$@" --db /tmp/e_$name.sqlite \
  --json $OUT/$name.json > /tmp/$name.txt 2>&1; echo "== $name"; tail -2 /tmp/$name.txt; cat /tmp/$name.txt >> $OUT/tables.txt; }
b misaligned --shapes scripts/classes/misaligned.yaml --shapes scripts/classes/small.yaml
T=150 b fp8 --shapes scripts/classes/fp8.yaml
TRITONBLAS_DB=/tmp/none.sqlite timeout 60 python3 scripts/dispatch_overhead.py --json $OUT/overhead.json 2>&1 | grep -v Warning | tail -9 | tee $OUT/overhead.txt
python3 - <<'PY' 2>&1 | grep -v Warning | tee $OUT/rows.txt
import json, os
for f in ["misaligned", "fp8"]:
    try: d = json.load(open(os.path.join(os.environ["OUT"], f + ".json")))
    except Exception as e: print(f, e); continue
    print(f, "geomean", round(d["geomean_speedup"], 3))
    for r in d["rows"]:
        print(f"  {r['m']}x{r['n']}x{r['k']} {r['dtype']} {r['backend']:6} {r['ms']*1e3:8.1f} {r['torch_ms']*1e3:8.1f} {r['speedup']:.3f} {r.get('rel_error')}")
PY
