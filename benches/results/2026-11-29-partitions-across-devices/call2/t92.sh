#!/usr/bin/env bash
# Session 24 call 2 (two H200s): partitions spread over both GPUs (gpu.devices = '0,1',
# gpu.devices_spread_partitions on). The placement tests; the fuzzer over the two GPUs (real peer
# copies); TPC-H and SSB SF30 on one GPU against both, answers checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o92; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 60 /tmp/b/lib-tests --test-threads 2 placed partitions_upload device:: > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"; grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head
timeout 80 /tmp/b/cli fuzz --queries 300 --seed $RANDOM --gpu-set gpu.devices=0,1 --max-failures 5 > $out/fuzz.txt 2> $out/fuzz.err
echo "fuzz rc=$? at $(el) s"; tail -2 $out/fuzz.txt
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local left=$(( 585 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite $label"; return; }
  timeout $left /tmp/b/cli bench $suite --sf 30 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label $suite-sf30-$label --out $out/$suite-$label "$@" > $out/$suite-$label.txt 2> $out/$suite-$label.err
  echo "$suite $label rc=$? at $(el) s"; grep -E "results:" $out/$suite-$label.txt
}
run tpch one
run tpch spread --gpu-set gpu.devices=0,1
run ssb one
run ssb spread --gpu-set gpu.devices=0,1
gzip $out/*.log $out/*.err; tar czf $OUT/o92.tar.gz -C $out .
