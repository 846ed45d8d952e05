#!/usr/bin/env bash
# Session 9 call 3: where the time of the GpuCachedTable queries goes, far above their floors:
# the debug timeline and EXPLAIN ANALYZE of TPC-H q1, q6, q2, q11 and SSB q1.1, q3.4 at SF10
# (--residency cached, 2 timed runs after the checked run that fills the cache).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o23; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench tpch --sf 10 --iterations 2 --queries 1,6,2,11 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-timeline.log 2>&1
echo "tpch timeline rc=$? at $(el) s"; grep -E "^q[0-9]+ " $out/tpch-timeline.log
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench ssb --sf 10 --iterations 2 --queries 1.1,3.4 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
echo "ssb timeline rc=$? at $(el) s"; grep -E "^q[0-9.]+ " $out/ssb-timeline.log
cd $out && tar czf $OUT/t23.tar.gz .
