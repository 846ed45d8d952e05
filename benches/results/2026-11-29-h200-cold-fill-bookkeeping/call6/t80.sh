#!/usr/bin/env bash
# Session 18 call 6: `bench --peer duckdb` (DuckDB 2.0.0 bundled in the binary, the `duckdb`
# feature, built from bb9678b) on a device for the first time: cold SSB and TPC-H SF10 over
# GpuCachedTable, 10 timed runs a query on each side, every answer of both engines checked
# against DataFusion's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o80; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli-duck.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  timeout 130 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --peer duckdb --out $out/records --label cold-peer > $out/$suite-cold-peer.log 2>&1
  echo "$suite rc=$? at $(el) s"
  grep -E "^peer:|results:|DuckDB's rows|geomean|total" $out/$suite-cold-peer.log
done
gzip $out/*.log
cd $out && tar czf $OUT/t80.tar.gz .
