# ===== call2.sh
#!/usr/bin/env bash
# Call 2: GPU suite (all but join::tests), the fuzz hang replays, SF1 checks; then fuzz x8 with the cases.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/repros
source scripts/device-env.sh >/dev/null
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
tests=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]+$' | head -1)
t0=$(date +%s)
# Phase A, at once: the suite, the six replays, SF1
( timeout 200 /tmp/b/$tests --test-threads 4 --skip join::tests > $out/tests.log 2>&1; echo "tests rc=$?" > $out/tests.rc ) &
( for sq in 101:17 103:160 104:98 104:233 105:295; do s=${sq%:*}; q=${sq#*:}; t=$(date +%s%N)
    timeout 200 datafusion-gpu fuzz --seed $s --only $q --timeout 150 > $out/replay-$s-$q.log 2>&1; rc=$?
    echo "replay seed $s query $q rc=$rc $(( ($(date +%s%N) - t) / 1000000 )) ms: $(grep '^seed' $out/replay-$s-$q.log | cut -c1-200)"; done > $out/replays.txt ) &
( timeout 200 datafusion-gpu bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/tpch-sf1-always.log 2>&1; echo "tpch rc=$?" > $out/sf1.rc
  timeout 100 datafusion-gpu bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/ssb-sf1-always.log 2>&1; echo "ssb rc=$?" >> $out/sf1.rc ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
# Phase B: fuzz 8 x 1250 with the cases beside it
t1=$(date +%s)
for j in 0 1 2 3 4 5 6 7; do
  timeout 390 datafusion-gpu fuzz --queries 1250 --seed $((201 + j)) --repro-dir $out/repros > $out/fuzz-seed$((201 + j)).log 2>&1 &
done
( timeout 390 bash .device/cases.sh > $out/cases.log 2>&1; echo "cases rc=$?" > $out/cases.rc ) &
wait
echo "phase B $(( $(date +%s) - t1 )) s"
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz; cd - >/dev/null
echo "== tests"; cat $out/tests.rc; grep -E '^test result|FAILED|panicked' $out/tests.log | head
echo "== replays"; cat $out/replays.txt
echo "== sf1"; cat $out/sf1.rc; grep -h 'results:' $out/*sf1*.log
echo "== cases"; cat $out/cases.rc; cut -c1-300 $out/cases.log
echo "== fuzz"; grep -h -A3 '^FAILED' $out/fuzz-seed*.log | cut -c1-400 | head -30; grep -h '^seed ' $out/fuzz-seed*.log
# ===== call3.sh
#!/usr/bin/env bash
# Call 3: TPC-H and SSB SF10, 5fe6206 (A) against this main (B) on one machine: data written once,
# then A tpch, B tpch, A ssb, B ssb (each the runner's checked, alternating CPU/GPU medians).
# Each binary has a kernel cache of its own: 5fe6206 loads any cached file of the right name.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/records
source scripts/device-env.sh >/dev/null
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
ls -la /tmp/b
t0=$(date +%s)
IT=${IT:-2}
run() { # binary label suite
  local t=$(date +%s)
  XDG_CACHE_HOME=/tmp/dfg-cache-$2 timeout ${RUN_TIMEOUT:-170} /tmp/b/$1 bench $3 --sf 10 --iterations $IT --data /tmp/dfg-data --out $out/records --label $2 > $out/$3-$2.log 2>&1
  echo "$3 $2 rc=$? $(( $(date +%s) - t )) s: $(grep 'results:' $out/$3-$2.log)"
}
# data for both suites written first, with a check-only pass
/tmp/b/datafusion-gpu-new bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 &
/tmp/b/datafusion-gpu-new bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
wait
echo "data $(( $(date +%s) - t0 )) s"; du -sh /tmp/dfg-data/*
run datafusion-gpu-old 5fe6206 tpch
run datafusion-gpu-new main tpch
run datafusion-gpu-old 5fe6206 ssb
run datafusion-gpu-new main ssb
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz; cd - >/dev/null
for f in $out/*-5fe6206.log $out/*-main.log; do echo "== $f"; grep -E "total|TOTAL|sum|results:" $f | tail -4; done
# ===== call5.sh
#!/usr/bin/env bash
# Call 5: q17 and q18 at SF10, ABAB (5fe6206 = A, main = B), 5 timed runs each.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/records
source scripts/device-env.sh >/dev/null
export DFG_REQUIRE_GPU=1
t0=$(date +%s)
[ -d /tmp/dfg-data/tpch-sf10 ] || XDG_CACHE_HOME=/tmp/dfg-cache-main timeout 80 /tmp/b/datafusion-gpu-new bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen.log 2>&1
echo "data $(( $(date +%s) - t0 )) s"
n=0
for b in old new old new; do n=$((n+1)); label=$([ $b = old ] && echo 5fe6206 || echo main)
  XDG_CACHE_HOME=/tmp/dfg-cache-$label timeout 45 /tmp/b/datafusion-gpu-$b bench tpch --sf 10 --queries 17,18 --iterations 5 --data /tmp/dfg-data --no-save > $out/q1718-$n-$label.log 2>&1
  echo "run $n $label rc=$?"; grep -E "^q1[78] |total" $out/q1718-$n-$label.log
done
cd $out && tar czf $OUT/logs.tar.gz .
