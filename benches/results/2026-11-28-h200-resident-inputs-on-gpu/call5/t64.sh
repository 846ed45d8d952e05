#!/usr/bin/env bash
# Session 15 call 5: where a pageable (uncached) SSB query's time goes, for the cold-path work:
# SSB SF10 over pageable in-memory tables (the runner's default residency), one timed run a query,
# and the debug timeline of q1.1 and q3.4.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o64; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1; echo "data at $(el) s"
timeout 150 $cli bench ssb --sf 10 --iterations 1 --cpu-iterations 0 --data /tmp/dfg-data --no-save > $out/ssb-pageable.log 2>&1
echo "pageable rc=$? at $(el) s"; grep -E "^q[0-9.]+ +[0-9]|total:|results:" $out/ssb-pageable.log | cut -c1-60
RUST_LOG=datafusion_gpu::timeline=debug timeout 90 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,3.4 --data /tmp/dfg-data --explain --no-save > $out/ssb-pageable-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"
grep -E "upload|staged|chunk" $out/ssb-pageable-timeline.log | tail -12 | cut -c1-200
gzip $out/*.log; cd $out && tar czf $OUT/t64.tar.gz .
