#!/usr/bin/env bash
# Session 9 call 5: a same-machine A/B of warp-aggregated sums and counts (datafusion-gpu: with;
# datafusion-gpu-old: ee2b75f, without) on TPC-H q1, q6, q18 at SF10 over GpuCachedTable, two
# rounds in turn; then the whole GPU test suite on the library with them.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o25; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 100 /tmp/b/datafusion-gpu bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
for round in 1 2; do
  for side in old new; do
    bin=/tmp/b/datafusion-gpu; [ $side = old ] && bin=/tmp/b/datafusion-gpu-old
    timeout 90 $bin bench tpch --sf 10 --iterations 5 --queries 1,6,18 --data /tmp/dfg-data --residency cached --no-save > $out/ab-$side-$round.log 2>&1
    echo "round $round $side rc=$? at $(el) s"; grep -E "^q(1|6|18) " $out/ab-$side-$round.log
  done
done
left=$(( 530 - $(el) ))
timeout $left $lib --test-threads 2 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s (limit $left s)"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
cd $out && tar czf $OUT/t25.tar.gz .
