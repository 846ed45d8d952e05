#!/usr/bin/env bash
# Session 14 call 4: the GPU suite and SF1 answers (TPC-H, SSB over GpuCachedTable, every operator
# on the GPU) on the final library (window_rows, swap_at_run_time, the cache key's digest); SF10
# SSB A/B of the two options (CLI, GPU only, same binary) and q2.1's timeline.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o53; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
grep -E "joins swapped" $out/tests.log | head -4
for suite in tpch ssb; do
  left=$(( 440 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  grep -E "swapped_at_run_time=[1-9]" -c $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite join lines swapped at run time: /"
done
left=$(( 545 - $(el) ))
[ $left -gt 30 ] && SUITES=ssb ROUNDS=2 BUDGET_S=$left timeout $left python3 .device6/settings.py $out new=$cli "noswap=$cli:SET gpu.join.swap_at_run_time = false" "win4M=$cli:SET gpu.join.window_rows = 4194304" 2>&1 | tail -17
left=$(( 590 - $(el) ))
[ $left -gt 15 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 2.1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
grep -E "^q[0-9.]+ " $out/ssb-timeline.log; grep "cached scan" $out/ssb-timeline.log | tail -8 | cut -c50-
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t53.tar.gz --exclude='*.sql' .
