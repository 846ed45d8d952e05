#!/usr/bin/env bash
# The probe-retention fix: library tests (all, join differential tests included), bench-crate
# tests, then q17 and q18 at SF10, 5fe6206 against this build, A B A B.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/fix.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b/datafusion_gpu-* | head -1); bench=$(ls /tmp/b/datafusion_gpu_bench-* | head -1)
( XDG_CACHE_HOME=/tmp/c1 timeout 150 $lib --test-threads 4 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" > $out/lib.rc ) &
( XDG_CACHE_HOME=/tmp/c2 timeout 330 $lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(el) s" > $out/join.rc ) &
( XDG_CACHE_HOME=/tmp/c3 timeout 200 $bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(el) s" > $out/bench.rc ) &
XDG_CACHE_HOME=/tmp/dfg-cache-new timeout 150 /tmp/b/dfg-new bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen.log 2>&1
echo "data at $(el) s"
wait
echo "tests done at $(el) s"
for r in 1 2; do for v in 5fe6206 new; do
  XDG_CACHE_HOME=/tmp/dfg-cache-$v timeout 60 /tmp/b/dfg-$v bench tpch --sf 10 --queries 17,18 --iterations 5 --data /tmp/dfg-data --no-save > $out/q-r$r-$v.log 2>&1
  echo "r$r $v rc=$? at $(el) s: q17 $(grep -E '^q17 ' $out/q-r$r-$v.log | awk '{print $3}') q18 $(grep -E '^q18 ' $out/q-r$r-$v.log | awk '{print $3}') $(grep -h 'results:' $out/q-r$r-$v.log)"
done; done | tee $out/ab.txt
cd $out && tar czf $OUT/fix-logs.tar.gz . ; cd - >/dev/null
echo "== tests"; cat $out/lib.rc $out/join.rc $out/bench.rc
grep -hE '^test result|FAILED|panicked' $out/tests-*.log | head -20
echo "== q17/q18 GPU ms (median of 5)"; cat $out/ab.txt
