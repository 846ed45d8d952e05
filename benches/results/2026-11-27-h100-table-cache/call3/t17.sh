#!/usr/bin/env bash
# Session 8 call 3: where the cached scans' time goes: SSB q1.1 and q3.4 at SF10 with the table
# cache and with resident tables, EXPLAIN ANALYZE of each and the timeline of q1.1 cached.
set -uo pipefail
out=/tmp/o17; rm -rf $out; mkdir -p $out
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
[ -x $cli ] || { mkdir -p /tmp/b; xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*; }
[ -d /tmp/dfg-data/ssb-sf10 ] || timeout 150 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
timeout 150 $cli bench ssb --sf 10 --iterations 3 --queries 1.1,3.4 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --explain --no-save > $out/ssb-cached-explain.log 2>&1; echo "cached rc=$?"
timeout 150 $cli bench ssb --sf 10 --iterations 3 --queries 1.1,3.4 --data /tmp/dfg-data --residency gpu --explain --no-save > $out/ssb-resident-explain.log 2>&1; echo "resident rc=$?"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench ssb --sf 10 --iterations 2 --queries 1.1 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --no-save > $out/ssb-cached-timeline.log 2>&1; echo "timeline rc=$?"
grep -E "^q[0-9]" $out/*explain.log | grep -v "with the"
cd $out && tar czf $OUT/t17.tar.gz . 
