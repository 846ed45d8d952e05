#!/usr/bin/env bash
# Session 7 call 8: the runner's Parquet reads spread over every partition; TPC-H SF10 resident
# (5 timed runs) and DuckDB 2.0.1 beside it, then SSB SF10 the same way.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o15; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
cli=/tmp/b/datafusion-gpu
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout 300 $cli bench tpch --sf 10 --iterations 5 --data /tmp/dfg-data --residency gpu --out $out/records --label gpu > $out/tpch-gpu.log 2>&1
echo "tpch gpu rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-gpu.log) $(grep -h 'results:' $out/tpch-gpu.log)"
timeout 120 python3 .device/duck.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 5 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "tpch duckdb rc=$? at $(el) s"
timeout 150 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
left=$(( 560 - $(el) ))
timeout $left $cli bench ssb --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --out $out/records --label gpu > $out/ssb-gpu.log 2>&1
echo "ssb gpu rc=$? at $(el) s: $(grep -h 'total:' $out/ssb-gpu.log) $(grep -h 'results:' $out/ssb-gpu.log)"
left=$(( 590 - $(el) ))
timeout $left python3 .device/duck.py ssb 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/ssb 5 $out/duckdb-ssb.json > $out/duckdb-ssb.log 2>&1
echo "ssb duckdb rc=$? at $(el) s"
cd $out && tar czf $OUT/t15.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
  try:
    duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
    gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")[0]))["queries"]}
  except Exception as e:
    print(suite, "missing", e); continue
  r = []
  for q, d in duck.items():
    g = gpu[q]; r.append(d["ms"] / g["gpu_ms"])
    print(f"  {q:<5}{d['ms']:8.1f}{g['gpu_ms']:8.1f}{g['cpu_ms']:9.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('check')}")
  print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x; slower {sum(1 for x in r if x < 1)}; totals GPU {sum(g['gpu_ms'] for g in gpu.values()):.0f} / DuckDB {sum(d['ms'] for d in duck.values()):.0f} / CPU {sum(g['cpu_ms'] for g in gpu.values()):.0f} ms")
PY
