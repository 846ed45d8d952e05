#!/usr/bin/env bash
# Session 13 call 5: pageable host tables (the runner's default residency: every GPU query uploads
# what it reads, nothing cached) at SF10 beside DuckDB 2.0.1 in the same call, one timed run a
# query after the checked run (the session's device time allowed no more), every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=$OUT/o48; mkdir -p $out/records /tmp/b
xz -dc .device5/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
for suite in tpch ssb; do
  left=$(( 255 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 80 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  left=$(( 255 - $(el) ))
  timeout $left $cli bench $suite --sf 10 --iterations 1 --data /tmp/dfg-data --residency pageable --out $out/records --label pageable-1 > $out/$suite-pageable-1.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-pageable-1.log) $(grep -h 'results:' $out/$suite-pageable-1.log)"
  left=$(( 270 - $(el) )); [ $left -lt 15 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 3 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  r=$(ls $out/records/*-$suite-sf10-pageable-1.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -3
done
echo "done at $(el) s"
gzip $out/*.log
