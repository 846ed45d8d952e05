#!/usr/bin/env bash
# Session 10 call 1: GPU parents read GPU aggregates' output on the device. The aggregate tests,
# then TPC-H SF10 over GpuCachedTable beside DuckDB 2.0.1 (same call, same Parquet, same texts).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o27; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 170 $lib --test-threads 2 aggregate:: > $out/tests-aggregate.log 2>&1; echo "aggregate tests rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests-aggregate.log | head -10
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout $(( 520 - $(el) )) $cli bench tpch --sf 10 --iterations 5 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/tpch-cached-table.log 2>&1
echo "tpch cached table rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-cached-table.log) $(grep -h 'results:' $out/tpch-cached-table.log)"
left=$(( 590 - $(el) ))
timeout $left python3 .device/duck.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 5 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "tpch duckdb rc=$? at $(el) s"
cd $out && tar czf $OUT/t27.tar.gz .
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch"]:
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
