#!/usr/bin/env bash
# Session 14 call 5: SF10 SSB and TPC-H over GpuCachedTable (the defaults) with 10 timed GPU runs a
# query (one timed CPU run; every answer checked against DataFusion's), DuckDB 2.0.1 beside it in
# the same call (same Parquet, same query texts, 16 threads, 10 timed runs after a warm-up).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o54; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  left=$(( 570 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 1 --data /tmp/dfg-data --residency cached --out $out/records --label cached-10 > $out/$suite-cached-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
  left=$(( 585 - $(el) ))
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
done
gzip $out/*.log
cd $out && tar czf $OUT/t54.tar.gz .
