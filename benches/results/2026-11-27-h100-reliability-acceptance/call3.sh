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
