#!/usr/bin/env bash
# Session 15 call 1: the GPU suite on the resident-inputs placement (joins, aggregates and HAVING
# filters over device inputs on the GPU whatever min_rows and the estimate say; Finals over GPU
# partials; aggregates over keys a filter makes constant; per-batch upload cost of host sides
# only), SF10 TPC-H and SSB over GpuCachedTable with the defaults and EXPLAIN (where every
# operator ran), and an A/B of gpu.cost.resident_inputs.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o60; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 120 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1;
  timeout 120 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait; echo "data at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 500 - $(el) )); [ $left -lt 50 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/$suite-sf10-explain.log 2>&1
  echo "$suite SF10 cached, defaults: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf10-explain.log) $(grep -h 'results:' $out/$suite-sf10-explain.log)"
  grep -E "^q[0-9.]+ +[0-9]" $out/$suite-sf10-explain.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}'
  grep -E "stays on the CPU|on the CPU:" $out/$suite-sf10-explain.log | sort | uniq -c | cut -c1-220 | head -12
done
left=$(( 585 - $(el) ))
[ $left -gt 40 ] && SUITES=ssb,tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out new=$cli "nores=$cli:SET gpu.cost.resident_inputs = false" 2>&1 | tail -42
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t60.tar.gz --exclude='*.sql' .
