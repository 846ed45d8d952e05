#!/usr/bin/env bash
# Session 24 call 1 (one H200): GPU operators' partitions spread over a device set
# (gpu.devices_spread_partitions). The whole GPU suite; TPC-H and SSB SF1 with every eligible
# operator on the GPU over two logical devices of GPU 0 ('0,0'), answers checked; the fuzzer
# over '0,0'.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o91; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 380 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
force=(--gpu-set gpu.devices=0,0 --gpu-set gpu.placement=always --gpu-set gpu.cost.min_rows=0)
for suite in tpch ssb; do
  left=$(( 560 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite"; break; }
  timeout $left /tmp/b/cli bench $suite --sf 1 --data /tmp/dfg-data --iterations 1 --cpu-iterations 0 --label $suite-sf1-two-logical --out $out/$suite "${force[@]}" > $out/$suite.txt 2> $out/$suite.err
  echo "$suite rc=$? at $(el) s"; grep -E "results:|MISMATCH|mismatch|error" $out/$suite.txt | head -5
done
left=$(( 585 - $(el) ))
[ $left -gt 20 ] && timeout $left /tmp/b/cli fuzz --queries 400 --seed $RANDOM --gpu-set gpu.devices=0,0 --max-failures 5 > $out/fuzz.txt 2> $out/fuzz.err
echo "fuzz rc=$? at $(el) s"; tail -4 $out/fuzz.txt
gzip $out/*.log $out/*.err; tar czf $OUT/o91.tar.gz -C $out .
