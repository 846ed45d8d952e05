# ===== ab.sh
#!/usr/bin/env bash
# Same-machine A/B at SF10: 5fe6206 (A) against the carried build (B), alternating A B A B ...,
# each build with a kernel cache of its own; per-query GPU medians of every run print last.
#   usage: .device/ab.sh SUITE ROUNDS [ITERATIONS]
set -uo pipefail
suite=$1 rounds=$2 it=${3:-2}
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/ab-$suite; rm -rf $out; mkdir -p $out/records /tmp/b
[ -x /tmp/b/dfg-new ] || { xz -dc .device/pair.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/dfg-*; }
source scripts/device-env.sh >/dev/null
export DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
[ -d /tmp/dfg-data/$suite-sf10 ] || XDG_CACHE_HOME=/tmp/dfg-cache-new timeout 150 /tmp/b/dfg-new bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen.log 2>&1
echo "data at $(el) s"
n=0
for r in $(seq $rounds); do for v in 5fe6206 new; do
  n=$((n+1))
  XDG_CACHE_HOME=/tmp/dfg-cache-$v timeout ${RUN_TIMEOUT:-170} /tmp/b/dfg-$v bench $suite --sf 10 --iterations $it --data /tmp/dfg-data \
      --out $out/records --label $v-$n > $out/run$n-$v.log 2>&1
  echo "run $n $v rc=$? at $(el) s: $(grep -h 'total:' $out/run$n-$v.log) $(grep -h 'results:' $out/run$n-$v.log)"
done; done
cd $out && tar czf $OUT/ab-$suite.tar.gz . ; cd - >/dev/null
echo "GPU ms per query, runs 1..$n (A=5fe6206 odd, B=new even):"
for q in $(grep -hoE '^q[0-9.]+ ' $out/run1-5fe6206.log); do
  printf '%-6s' $q; for f in $(ls $out/run*-*.log | sort -V); do printf ' %7s' "$(grep -E "^$q " $f | awk '{print $3}')"; done; echo
done
# ===== final.sh
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
# ===== fix.sh
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
