#!/usr/bin/env bash
# Session 15 call 2: the GPU suite on the final rule (resident inputs, repartitions of device
# inputs read around, round-robin probes of one-partition regions on the device), SF1 answers over
# GpuCachedTable with the defaults, and SF10 EXPLAIN of the queries whose plans changed.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o62; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 120 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1;
  timeout 60 $cli bench tpch --sf 1 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-sf1-tpch.log 2>&1;
  timeout 60 $cli bench ssb --sf 1 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-sf1-ssb.log 2>&1 ) &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait; echo "data at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 470 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/$suite-sf1-cached.log 2>&1
  echo "$suite SF1 cached, defaults: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-cached.log)"
  grep -E "^q[0-9.]+ +[0-9]" $out/$suite-sf1-cached.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}' | grep -v "aggs [0-9]/[0-9] GPU" | head
  grep -E "^ +CpuFallbackExec|^ +FilterExec" $out/$suite-sf1-cached.log | cut -c1-160 | sort | uniq -c | head
done
left=$(( 585 - $(el) ))
[ $left -gt 40 ] && timeout $left $cli bench tpch --sf 10 --iterations 3 --cpu-iterations 1 --queries 8,11,17,20,22 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-sf10-explain.log 2>&1
grep -E "^q[0-9.]+ +[0-9]" $out/tpch-sf10-explain.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}'
grep -E "^ +CpuFallbackExec|^ +FilterExec" $out/tpch-sf10-explain.log | cut -c1-160 | sort | uniq -c | head
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t62.tar.gz .
