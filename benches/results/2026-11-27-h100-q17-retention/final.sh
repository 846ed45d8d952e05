#!/usr/bin/env bash
# Final check of the workspace build: library tests, bench-crate tests, SF1 checks, demo; and q17
# at SF10 alone with the run-time fallback on and off (attributing the q17 slowdown).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/final.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-4f286c46de6e4ee6; bench=/tmp/b/datafusion_gpu_bench-04ccc5c8e78287a8; cli=/tmp/b/datafusion-gpu
( timeout 200 $lib --test-threads 4 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" > $out/lib.rc ) &
[ -d /tmp/dfg-data/tpch-sf10 ] || timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen.log 2>&1
wait
echo "phase 1 at $(el) s"; cat $out/lib.rc
for s in default gpu.cpu_fallback=false default gpu.cpu_fallback=false gpu.probe_read_ahead=0; do
  set_arg=(); [ $s != default ] && set_arg=(--gpu-set $s)
  timeout 60 $cli bench tpch --sf 10 --queries 17 --iterations 5 --data /tmp/dfg-data --no-save "${set_arg[@]}" > $out/q17-$s.log 2>&1
  echo "q17 $s rc=$? at $(el) s: $(grep -E '^q17 ' $out/q17-$s.log | awk '{print $2, $3}')"
done | tee $out/q17.txt
( timeout $(( 580 - $(el) )) $lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(el) s" > $out/join.rc ) &
( timeout 200 $bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(el) s" > $out/bench.rc
  timeout 150 $cli bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/tpch-sf1-always.log 2>&1; echo "tpch sf1 rc=$? at $(el) s" > $out/sf1.rc
  timeout 100 $cli bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/ssb-sf1-always.log 2>&1; echo "ssb sf1 rc=$? at $(el) s" >> $out/sf1.rc
  timeout 60 $cli demo > $out/demo.log 2>&1; echo "demo rc=$? at $(el) s" >> $out/sf1.rc ) &
wait
cd $out && tar czf $OUT/final-logs.tar.gz . ; cd - >/dev/null
echo "== tests"; cat $out/lib.rc $out/bench.rc $out/join.rc
grep -hE '^test result|FAILED|panicked' $out/tests-*.log | head -20
echo "== sf1"; cat $out/sf1.rc; grep -h 'results:' $out/*sf1*.log; tail -3 $out/demo.log
echo "== q17"; cat $out/q17.txt
