#!/usr/bin/env bash
# Session 11 call 5: where TPC-H q2 and q11 (the two queries still slower than DuckDB) spend their
# time: debug timelines and EXPLAIN ANALYZE at SF10 over GpuCachedTable (b8d6452's code).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o37; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device2/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench tpch --sf 10 --iterations 2 --queries 2,11 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"; grep -E "^q[0-9]+ " $out/tpch-timeline.log
gzip $out/tpch-timeline.log
cd $out && tar czf $OUT/t37.tar.gz .
