#!/usr/bin/env bash
# Session 11 call 2: the cached scan's layouts kept per table (A/B against the binary before, same
# machine, CLI, GPU only); kernel time per query by ncu; debug timelines of short queries.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o34; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; old=/tmp/b/datafusion-gpu-old
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data at $(el) s"
timeout 200 python3 .device/ab_cli.py $out $old $cli 2>&1 | tail -45
echo "A/B done at $(el) s"
for sq in "ssb q1.1" "tpch q2"; do
  left=$(( 540 - $(el) )); [ $left -lt 40 ] && break
  timeout $left python3 .device/ncu_runs.py $out $cli $sq 3 2>&1 | tail -22
done
echo "ncu done at $(el) s"
left=$(( 590 - $(el) ))
[ $left -gt 25 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --queries 1.1,3.4 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
echo "done at $(el) s"
cd $out && tar czf $OUT/t34.tar.gz --exclude='*.sql' .
