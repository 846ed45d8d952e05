#!/usr/bin/env bash
# Session 24 call 4 (two H200s), after capping each device's staging rings at 16 (call 3 found
# SSB q2.1 over both GPUs pinning new staging slots one after another in its timed run): the
# device, transfer and upload tests; SSB and TPC-H SF30 over both GPUs (partitions spread) and
# on one, answers checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o94; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 70 /tmp/b/lib-tests --test-threads 2 device:: transfer upload > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"; grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local left=$(( 515 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite $label"; return; }
  timeout $left /tmp/b/cli bench $suite --sf 30 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label $suite-sf30-$label --out $out/$suite-$label "$@" > $out/$suite-$label.txt 2> $out/$suite-$label.err
  echo "$suite $label rc=$? at $(el) s"; grep -E "results:" $out/$suite-$label.txt
}
run ssb spread --gpu-set gpu.devices=0,1
run ssb one
run tpch spread --gpu-set gpu.devices=0,1
run tpch one
gzip $out/*.log $out/*.err; tar czf $OUT/o94.tar.gz -C $out .
