#!/usr/bin/env bash
# Session 23 call 3 (two H200s), after granting each GPU's memory pool to the other (call 2's
# copies between the GPUs went through host memory at 38 GB/s): the GPU suite (every test, the
# multi-GPU join on 2 and 4 logical devices included); doctor's copy matrix; bench multi-gpu on 1
# and 2 GPUs; TPC-H SF10 with every GPU join forced to smj_multi_gpu over both GPUs.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o83; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 400 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
timeout 40 /tmp/b/cli doctor --devices 0,1 > $out/doctor.txt 2>&1; echo "doctor rc=$? at $(el) s"; tail -5 $out/doctor.txt
timeout 120 /tmp/b/cli bench multi-gpu --ordinals 0,1 --log-rows 26,28,30 --gpus 1,2 --runs 2 > $out/bench.txt 2> $out/bench.err; echo "bench rc=$? at $(el) s"; cat $out/bench.txt; grep -E "error|Error" $out/bench.err | head
left=$(( 585 - $(el) ))
[ $left -gt 40 ] && timeout $left /tmp/b/cli bench tpch --sf 10 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label tpch-forced --out $out/tpch-forced --gpu-set gpu.devices=0,1 --gpu-set gpu.join.algorithm=smj_multi_gpu > $out/tpch-forced.txt 2> $out/tpch-forced.err
echo "tpch forced rc=$? at $(el) s"; grep -E "results:" $out/tpch-forced.txt
gzip $out/*.log $out/*.err; tar czf $OUT/o83.tar.gz -C $out .
