#!/usr/bin/env bash
# Session 14 call 1: where SSB's time goes at SF10 over GpuCachedTable (debug timeline and EXPLAIN
# ANALYZE of q1.1, q2.1, q3.4, q4.2), and same-binary A/B of gpu.cost.min_rows (100000 vs 0) and
# placement=always on SSB and TPC-H (CLI, GPU only, 4 runs a query, median of the last 3).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o50; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench ssb --sf 10 --iterations 2 --queries 1.1,2.1,3.4,4.2 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"; grep -E "^q[0-9.]+ " $out/ssb-timeline.log
left=$(( 330 - $(el) ))
SUITES=ssb ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "rows0=$cli:SET gpu.cost.min_rows = 0" "always=$cli:SET gpu.cost.min_rows = 0;SET gpu.placement = always" 2>&1 | tail -17
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
left=$(( 585 - $(el) ))
SUITES=tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "rows0=$cli:SET gpu.cost.min_rows = 0" 2>&1 | tail -26
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t50.tar.gz --exclude='*.sql' .
