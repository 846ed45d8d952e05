#!/usr/bin/env bash
# Session 16 call 6: a process's first query over cold GpuCachedTables (SSB SF10 q1.1): the
# runner's untimed checked run is the process's first GPU query; its timeline shows the pinned
# staging memory being allocated. Then the 3 cold timed runs for comparison.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o70; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1; echo "data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 90 $cli bench ssb --sf 10 --iterations 3 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-first-query.log 2>&1
echo "rc=$? at $(el) s"
grep -c "pinned pool: allocated" $out/ssb-first-query.log
grep -E "rule: starts|timed run|final state downloaded|upload: [0-9]{4,}" $out/ssb-first-query.log | cut -c45-200 | head -12
grep "pinned pool: allocated" $out/ssb-first-query.log | head -3 | cut -c45-200
grep "pinned pool: allocated" $out/ssb-first-query.log | tail -2 | cut -c45-200
grep -E "^q1.1" $out/ssb-first-query.log
gzip $out/*.log; cd $out && tar czf $OUT/t70.tar.gz .
