#!/usr/bin/env bash
# Session 10 call 5 (792c27a + 3ef25f4): SF10 TPC-H and SSB over GpuCachedTable (--residency cached)
# beside DuckDB 2.0.1 in the same call (same Parquet, same query texts), each query against its floor;
# then, with the time left, the rule's debug log for TPC-H q20.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o31; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
echo "(the GPU suite ran in call 4)"
for suite in tpch ssb; do
  iters=$([ $suite = tpch ] && echo 5 || echo 3)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  left=$(( 560 - $(el) )); [ $left -lt 150 ] && { echo "no time for $suite"; continue; }
  timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout $(( 540 - $(el) )) $cli bench $suite --sf 10 --iterations $iters --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 590 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t31.tar.gz .
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached-table.json")[0]))["queries"]}
    except Exception as e:
        print(suite, "missing", e); continue
    r = []
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x floor {g.get('floor_ms') or 0:7.3f} {g.get('ok')}")
    print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
# Why TPC-H q20's semi join over the grouped lineitem sums stays Partitioned: the rule's debug log.
left=$(( 597 - $(el) )); [ $left -gt 25 ] && RUST_LOG=datafusion_gpu=debug timeout $left $cli bench tpch --sf 10 --iterations 1 --queries 20 --data /tmp/dfg-data --residency cached --explain --no-save > /tmp/q20-debug.log 2>&1
grep -v "timeline" /tmp/q20-debug.log | gzip > $OUT/q20-debug.log.gz
