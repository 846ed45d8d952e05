#!/usr/bin/env bash
# Session 7 call 1: the library suite (resident tests included) on main 26d3ade, then TPC-H and SSB
# SF10 with GPU-resident tables and --explain (EXPLAIN ANALYZE of every query) to see where the
# slow queries spend their time.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o8; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 150 $lib --test-threads 2 > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test result|FAILED|panicked" $out/tests-lib.log | head -20
grep -E "^test .*resident" $out/tests-lib.log
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 1 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu-explain > $out/$suite-gpu-explain.log 2>&1
  echo "$suite gpu explain rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu-explain.log) $(grep -h 'results:' $out/$suite-gpu-explain.log)"
done
cd $out && tar czf $OUT/t8.tar.gz . ; cd - >/dev/null
grep -E "^q[0-9.]+ " $out/tpch-gpu-explain.log $out/ssb-gpu-explain.log | head -40
