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
