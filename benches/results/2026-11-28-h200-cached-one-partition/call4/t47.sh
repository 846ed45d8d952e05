#!/usr/bin/env bash
# Session 13 call 3/4: SF10 $SUITE over GpuCachedTable (cached regions in one partition, the new
# default) with 10 timed runs a query, every answer checked; DuckDB 2.0.1 beside it in the same
# call (same Parquet, same query texts, 16 threads, 10 timed runs after a warm-up).
set -uo pipefail
suite=$1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o47-$suite; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device5/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
echo "data at $(el) s"
timeout $(( 520 - $(el) )) $cli bench $suite --sf 10 --iterations 10 --data /tmp/dfg-data --residency cached --out $out/records --label cached-one-partition-10 > $out/$suite-cached-10.log 2>&1
echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
timeout $(( 585 - $(el) )) python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-$suite-sf10-cached-one-partition-10.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t47-$suite.tar.gz .
