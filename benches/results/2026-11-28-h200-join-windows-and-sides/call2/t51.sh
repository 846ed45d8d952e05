#!/usr/bin/env bash
# Session 14 call 2: same-binary A/B of the join's output window (gpu.batch_rows 4M default, 16M,
# 64M) and the probe read-ahead, SSB and TPC-H SF10 over gpu_cache'd tables (CLI, GPU only, 4 runs a
# query, median of the last 3).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o51; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
left=$(( 330 - $(el) ))
SUITES=ssb ROUNDS=2 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "b16M=$cli:SET gpu.batch_rows = 16777216" "b64M=$cli:SET gpu.batch_rows = 67108864" "ra4=$cli:SET gpu.join.probe_read_ahead = 4" 2>&1 | tail -17
left=$(( 585 - $(el) ))
SUITES=tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "b16M=$cli:SET gpu.batch_rows = 16777216" "b64M=$cli:SET gpu.batch_rows = 67108864" 2>&1 | tail -26
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t51.tar.gz --exclude='*.sql' .
