#!/usr/bin/env bash
# Session 9 call 1: the whole GPU test suite on the library with substr, computed string outputs and
# scalar-subquery literals; SF1 TPC-H and SSB over GpuCachedTable and over gpu.table_cache, every
# operator placed on the GPU where it can run, every answer checked against DataFusion's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o21; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 400 $lib --test-threads 2 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -20
for suite in tpch ssb; do
  timeout 90 $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  left=$(( 575 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite table_cache"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --gpu-min-rows 0 --gpu-set gpu.placement=always --gpu-set gpu.table_cache=true --no-save > $out/$suite-sf1-table-cache-always.log 2>&1
  echo "$suite SF1 gpu.table_cache, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-table-cache-always.log) $(grep -h 'results:' $out/$suite-sf1-table-cache-always.log)"
done
grep -c "not supported on the GPU" $out/tpch-sf1-cached-table-always.log
grep -o "expression \`[^\`]*\` is not supported on the GPU" $out/*-sf1-cached-table-always.log | sort | uniq -c | head
cd $out && tar czf $OUT/t21.tar.gz .
