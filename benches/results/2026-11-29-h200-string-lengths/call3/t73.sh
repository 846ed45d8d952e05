#!/usr/bin/env bash
# Session 17 call 3: issue 46's cold case on the final build (string offsets sent as 1-byte row
# lengths, each view read once; no huge-page advice). SSB and TPC-H SF10 over pageable in-memory
# tables registered as GpuCachedTable, the device's table cache emptied before each of 10 timed
# GPU runs a query (--cold), every answer checked; DuckDB 2.0.1 in the same call (16 threads, same
# Parquet and query texts, its own in-memory tables, 10 timed runs after a warm-up); timelines of
# cold TPC-H q1 and q19 and SSB q1.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o73; rm -rf $out; mkdir -p $out/records /tmp/b
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
for suite in ssb tpch; do
  timeout 120 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold-10 > $out/$suite-cold-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold-10.log) $(grep -h 'results:' $out/$suite-cold-10.log)"
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cold-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -26
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
RUST_LOG=datafusion_gpu::timeline=debug timeout 60 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 1,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timelines at $(el) s"
grep -E "upload: [0-9]{4,}|timed run ends" $out/ssb-cold-timeline.log $out/tpch-cold-timeline.log | tail -4 | cut -c60-230
gzip $out/*.log
cd $out && tar czf $OUT/t73.tar.gz .
