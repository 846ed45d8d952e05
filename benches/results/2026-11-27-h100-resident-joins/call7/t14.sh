#!/usr/bin/env bash
# Session 7 call 7 (4ef8b55): TPC-H SF10 over resident tables with 10 timed runs a query and
# DuckDB 2.0.1 with 10 beside it; then the debug timeline (RUST_LOG) and EXPLAIN ANALYZE of the
# queries still slower than DuckDB (q2, q11, q22) and of q15 and q20.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o14; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
cli=/tmp/b/datafusion-gpu
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout 300 $cli bench tpch --sf 10 --iterations 10 --data /tmp/dfg-data --residency gpu --out $out/records --label gpu-10runs > $out/tpch-gpu-10runs.log 2>&1
echo "tpch gpu rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-gpu-10runs.log) $(grep -h 'results:' $out/tpch-gpu-10runs.log)"
timeout 120 python3 .device/duck.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 10 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "tpch duckdb rc=$? at $(el) s"
left=$(( 580 - $(el) ))
[ $left -gt 30 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench tpch --sf 10 --queries 2,11,15,20,22 --iterations 1 --data /tmp/dfg-data --residency gpu --explain --no-save > $out/tpch-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"
cd $out && tar czf $OUT/t14.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-tpch.json"))["queries"]}
gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-tpch-sf10-gpu-10runs.json")[0]))["queries"]}
r = []
for q, d in duck.items():
    g = gpu[q]; r.append(d["ms"] / g["gpu_ms"])
    print(f"  {q:<5}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x runs {len(g['gpu_runs_ms'])}/{len(d['runs_ms'])} {g.get('check')}")
print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x; slower {sum(1 for x in r if x < 1)}; totals {sum(g['gpu_ms'] for g in gpu.values()):.0f} / {sum(d['ms'] for d in duck.values()):.0f} ms")
PY
