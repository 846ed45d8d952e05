#!/usr/bin/env bash
# Call 1: the GPU suite (library, join differential tests, bench crate, sqllogictests), SF1 checks
# with every eligible operator on the GPU, the demo.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/tests.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-02e1eebef466457e; bench=/tmp/b/datafusion_gpu_bench-d16751cd728006b9
slt=/tmp/b/sqllogictests-02d8a4161dc6bc47; cli=/tmp/b/datafusion-gpu
echo "unpacked at $(el) s"
timeout 200 $lib --test-threads 4 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" > $out/lib.rc
cat $out/lib.rc
( timeout $(( 570 - $(el) )) $lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(el) s" > $out/join.rc ) &
( timeout 200 $bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(el) s" > $out/bench.rc
  timeout 100 $slt > $out/tests-slt.log 2>&1; echo "sqllogictests rc=$? at $(el) s" >> $out/bench.rc
  timeout 150 $cli bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/tpch-sf1-always.log 2>&1; echo "tpch sf1 rc=$? at $(el) s" > $out/sf1.rc
  timeout 100 $cli bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/ssb-sf1-always.log 2>&1; echo "ssb sf1 rc=$? at $(el) s" >> $out/sf1.rc
  timeout 60 $cli demo > $out/demo.log 2>&1; echo "demo rc=$? at $(el) s" >> $out/sf1.rc ) &
wait
cd $out && tar czf $OUT/t1-logs.tar.gz . ; cd - >/dev/null
echo "== tests"; cat $out/lib.rc $out/bench.rc $out/join.rc
grep -hE '^test result|FAILED|panicked|^test .* FAILED' $out/tests-*.log | head -30
grep -h "out-of-core joins:\|one after another" $out/tests-join.log | tail -8
echo "== sf1"; cat $out/sf1.rc; grep -h 'results:' $out/*sf1*.log; tail -3 $out/demo.log
