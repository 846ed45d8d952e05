#!/usr/bin/env bash
# Session 12 call 6: TPC-H SF10 over GpuCachedTable with 10 timed runs a query (issue 46's count),
# DuckDB 2.0.1 beside it in the same call with 10 timed runs, final code (741ccd0).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o44; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data at $(el) s"
timeout $(( 205 - $(el) )) $cli bench tpch --sf 10 --iterations 10 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table-10 > $out/tpch-cached-table-10.log 2>&1
echo "tpch rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-cached-table-10.log) $(grep -h 'results:' $out/tpch-cached-table-10.log)"
timeout $(( 245 - $(el) )) python3 scripts/duckdb-peer.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 10 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-tpch-sf10-cached-table-10.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-tpch.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-tpch.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t44.tar.gz .
