#!/usr/bin/env bash
# Session 10 call 4 (792c27a + 3ef25f4): the GPU suite; SF1 TPC-H and SSB over GpuCachedTable with
# every operator on the GPU, every answer checked; SSB SF10 through the CLI (gpu_cache of Parquet)
# at target_partitions 16, 8, 4 (call 3 ran it before gpu_cache kept the target partitions).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o30; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 330 $lib --test-threads 2 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout 80 $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
done
left=$(( 585 - $(el) ))
timeout 60 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb sf10 data at $(el) s"
left=$(( 590 - $(el) ))
[ $left -gt 60 ] && SUITES=ssb timeout $left python3 .device/cli_partitions.py $out $cli
echo "done at $(el) s"
cd $out && tar czf $OUT/t30.tar.gz .
