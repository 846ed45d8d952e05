#!/usr/bin/env bash
# Session 16 call 1: the cold path of issue 46 as it stands. SSB and TPC-H SF10 over pageable
# in-memory tables with gpu.table_cache on, the cache emptied before each timed GPU run (--cold),
# 3 timed runs a query, every answer checked; DuckDB 2.0.1 in the same call (10 runs); the
# transfer benchmark (host copy and staged upload rates); timelines of cold SSB q1.1 and TPC-H q6.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o65; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|L3" | tee $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
timeout 60 $cli bench transfer > $out/transfer.log 2>&1; echo "transfer rc=$? at $(el) s"; tail -25 $out/transfer.log
for suite in ssb tpch; do
  left=$(( 400 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --cold --out $out/records --label cold > $out/$suite-cold.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold.log) $(grep -h 'results:' $out/$suite-cold.log)"
  left=$(( 470 - $(el) ))
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cold.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -27
done
left=$(( 560 - $(el) ))
[ $left -gt 20 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 1 --cpu-iterations 0 --queries 1.1,3.4 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline ssb at $(el) s"
left=$(( 590 - $(el) ))
[ $left -gt 20 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench tpch --sf 10 --iterations 1 --cpu-iterations 0 --queries 6 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t65.tar.gz .
