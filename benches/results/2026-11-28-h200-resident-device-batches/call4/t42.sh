#!/usr/bin/env bash
# Session 12 call 4: SF10 TPC-H and SSB over GpuCachedTable (device batches of
# gpu.table_cache.batch_rows = 2^26 rows) beside DuckDB 2.0.1 in the same call (same Parquet, same
# query texts, 16 threads); then the CLI with that default against 2^22-row cache batches.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o42; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
for suite in ssb tpch; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  [ -d /tmp/dfg-data/$suite-sf10 ] || timeout 130 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  left=$(( 470 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 500 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-table.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -4
done
left=$(( 585 - $(el) ))
[ $left -gt 60 ] && SUITES=ssb,tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device4/settings.py $out b64M=$cli "b4M=$cli:SET gpu.table_cache.batch_rows = 4194304" 2>&1 | tail -42
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t42.tar.gz --exclude='*.sql' .
