#!/usr/bin/env bash
# Session 8 call 1 (gpu.table_cache): the cache's and the resident tests; SF1 TPC-H and SSB over
# pageable in-memory tables with the table cache, every operator on the GPU (answers checked,
# the checked run fills the cache, the timed run reads it); SF10 both suites with the cache
# (3 timed runs after the checked run) beside DuckDB 2.0.1, same machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o16; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
[ -n "${SKIP_TESTS:-}" ] || timeout 120 $lib --test-threads 1 --nocapture cached resident session > $out/tests-cache.log 2>&1; echo "cache + resident tests rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test |^test result|panicked" $out/tests-cache.log | head -20
for suite in tpch ssb; do
  timeout 100 $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --gpu-min-rows 0 --gpu-set gpu.placement=always --gpu-set gpu.table_cache=true --explain --no-save > $out/$suite-sf1-cached-always.log 2>&1
  echo "$suite SF1 cached, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-always.log)"
done
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 220 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --out $out/records --label cached > $out/$suite-cached.log 2>&1
  echo "$suite cached rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached.log) $(grep -h 'results:' $out/$suite-cached.log)"
  left=$(( 570 - $(el) )); [ $left -lt 40 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t16.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-cached.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-cached-ms ratio rows check")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('ok')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
