#!/usr/bin/env bash
# Session 15 call 2: SF10 SSB and TPC-H over GpuCachedTable (the defaults) with 10 timed GPU runs a
# query (one timed CPU run; every answer checked against DataFusion's) and EXPLAIN, DuckDB 2.0.1
# beside it in the same call (same Parquet, same query texts, 16 threads, 10 timed runs after a
# warm-up); then SF1 answers with the cache on (defaults).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o61; rm -rf $out; mkdir -p $out/records /tmp/b
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
  left=$(( 480 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 1 --data /tmp/dfg-data --residency cached --out $out/records --label cached-10 > $out/$suite-cached-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
  grep -E "stays on the CPU|on the CPU:" $out/$suite-cached-10.log | sort | uniq -c | cut -c1-200 | head -8
  left=$(( 500 - $(el) ))
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
done
for suite in tpch ssb; do
  left=$(( 540 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 40 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  left=$(( 545 - $(el) ))
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/$suite-sf1-cached.log 2>&1
  echo "$suite SF1 cached, defaults: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-cached.log)"
  grep -E "^q[0-9.]+ +[0-9]" $out/$suite-sf1-cached.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}' | grep -v "aggs [0-9]/[0-9] GPU" | head
  grep -E "^ +CpuFallbackExec|^ +FilterExec" $out/$suite-sf1-cached.log | cut -c1-160 | sort | uniq -c | head
done
left=$(( 595 - $(el) ))
[ $left -gt 20 ] && timeout $left $cli bench tpch --sf 10 --iterations 1 --cpu-iterations 0 --queries 7,8,20 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-sf10-q7-explain.log 2>&1
grep -E "^q[0-9.]+ +[0-9]" $out/tpch-sf10-q7-explain.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}'
grep -cE "^ +CpuFallbackExec|^ +FilterExec" $out/tpch-sf10-q7-explain.log | sed 's/^/CPU filters and fallbacks in q7, q8, q20 at SF10: /'
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t61.tar.gz .
