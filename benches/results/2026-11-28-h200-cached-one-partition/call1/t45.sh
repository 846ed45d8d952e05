#!/usr/bin/env bash
# Session 13 call 1: the GPU suite on the library with cached regions run as one partition
# (gpu.table_cache.one_partition), SF1 TPC-H and SSB over GpuCachedTable with every operator on
# the GPU and every answer checked, then SF10 SSB in the CLI with the option on and off (same binary).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o45; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device5/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 560 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  grep -c "read as one" $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite scan lines read as one: /"
done
left=$(( 585 - $(el) ))
if [ $left -gt 120 ]; then
  timeout 70 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  left=$(( 585 - $(el) ))
  SUITES=ssb ROUNDS=1 BUDGET_S=$left timeout $left python3 .device5/settings.py $out one=$cli "parts=$cli:SET gpu.table_cache.one_partition = false" 2>&1 | tail -18
fi
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t45.tar.gz --exclude='*.sql' .
