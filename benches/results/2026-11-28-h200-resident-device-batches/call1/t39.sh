#!/usr/bin/env bash
# Session 12 call 1: the GPU suite (one-group reductions per block, filters over GPU operators on the device), then SF1 TPC-H
# and SSB over GpuCachedTable with every operator on the GPU, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o39; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device4/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 400 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 585 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $(( 590 - $(el) )) $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
done
for suite in tpch ssb; do grep -c "GpuFilterProjectExec: on the GPU=\[FilterExec" $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite GPU filter-project lines: /"; done
grep -A3 "^q11 with the GPU rule" $out/tpch-sf1-cached-table-always.log | cut -c1-200
gzip $out/*.log
cd $out && tar czf $OUT/t39.tar.gz .
