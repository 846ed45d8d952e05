#!/usr/bin/env bash
# Session 20 call 3: issue 46's acceptance on main (06aa2d7) in one call, beside DuckDB 2.0.1.
# SF10 over GpuCachedTable, every answer checked, 10 timed runs a query: warm (columns cached by
# the checked run) and cold (cache emptied before each run, host images on and pinned, the
# defaults);
# DuckDB with 16 threads on the same Parquet and query texts (10 runs after a warm-up); SF1 with
# EXPLAIN: no CpuFallbackExec, FilterExec or DataSourceExec in any plan.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o88; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
run() { # suite label extra-args...
  local suite=$1 label=$2; shift 2
  timeout 120 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached "$@" --out $out/records --label $label > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log) $(grep -ho 'host images[^)]*)[^)]*), placed in [0-9.]* s' $out/$suite-$label.log)"
  r=$(ls $out/records/*-$suite-sf10-$label.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -1
}
for suite in ssb tpch; do
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  run $suite warm
  run $suite cold --cold
done
for suite in tpch ssb; do
  [ $(el) -gt 540 ] && break
  timeout 40 $cli bench $suite --sf 1 --iterations 1 --residency cached --explain --no-save > $out/$suite-sf1-explain.log 2>&1
  echo "$suite SF1 explain rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-explain.log); CPU nodes: $(grep -cE '^ +(CpuFallbackExec|FilterExec|DataSourceExec)' $out/$suite-sf1-explain.log)"
done
[ $(el) -lt 500 ] && run ssb cold-pageable-images --cold --gpu-set gpu.table_cache.host_image_pinned=false
gzip $out/*.log
cd $out && tar czf $OUT/t88.tar.gz .
