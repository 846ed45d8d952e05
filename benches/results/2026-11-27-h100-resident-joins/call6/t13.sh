#!/usr/bin/env bash
# Session 7 call 6: the GPU suite (library tests, the join differential tests included) on the
# final build; the resident tests with their output; TPC-H and SSB SF1 over resident tables with
# every operator on the GPU, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o13; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
timeout 100 $lib --test-threads 1 --nocapture resident > $out/tests-resident.log 2>&1; echo "resident tests rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test |^test result" $out/tests-resident.log
timeout 420 $lib --test-threads 2 > $out/tests-lib.log 2>&1; echo "GPU suite (library, join tests included) rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test result|FAILED|panicked" $out/tests-lib.log | head
for suite in tpch ssb; do
  left=$(( 585 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 0 --data /tmp/dfg-data --residency gpu --gpu-min-rows 0 --no-save > $out/$suite-sf1-resident-always.log 2>&1
  echo "$suite SF1 resident, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-resident-always.log)"
done
cd $out && tar czf $OUT/t13.tar.gz . ; cd - >/dev/null
