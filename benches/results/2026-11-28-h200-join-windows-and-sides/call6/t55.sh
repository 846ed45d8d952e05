#!/usr/bin/env bash
# Session 14 call 6: TPC-H SF30 over GpuCachedTable beside DuckDB 2.0.1 (a larger scale factor
# toward issue 46's "largest SF on an H200"): 3 timed GPU runs a query, every answer checked, no
# timed CPU runs; DuckDB 3 timed runs after a warm-up, same Parquet and query texts.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o55; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
free -g | head -2
timeout 230 $cli bench tpch --sf 30 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data rc=$? at $(el) s"; du -sh /tmp/dfg-data/tpch-sf30 2>/dev/null
left=$(( 290 - $(el) ))
[ $left -gt 60 ] && timeout $left $cli bench tpch --sf 30 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --out $out/records --label cached-3 > $out/tpch-sf30-cached-3.log 2>&1
echo "tpch SF30 rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-sf30-cached-3.log) $(grep -h 'results:' $out/tpch-sf30-cached-3.log)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
left=$(( 345 - $(el) ))
[ $left -gt 30 ] && timeout $left python3 scripts/duckdb-peer.py tpch 30 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 3 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-tpch-sf30-cached-3.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-tpch.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-tpch.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t55.tar.gz .
