#!/usr/bin/env bash
# Session 25 call 3 (two H200s): the chunkset join's figures on 1 and 2 GPUs, with chunks as large
# as the devices allow (one chunkset per relation) and with chunks of 2^28 rows (several
# chunksets, the CPU merge); then the GPU tests that call 2's 360 s did not reach.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
here=benches/results/2026-11-30-multi-gpu-out-of-core/call3
out=/tmp/o103; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nvidia-smi topo -m > $out/topo.txt 2>&1; nproc; free -g | head -2
timeout 170 /tmp/b/cli bench chunksets --ordinals 0,1 --gpus 1,2 --log-rows 28,30,31 --runs 1 > $out/whole.txt 2> $out/whole.err
echo "whole chunks rc=$? at $(el) s"; cat $out/whole.txt
timeout 230 /tmp/b/cli bench chunksets --ordinals 0,1 --gpus 1,2 --log-rows 30,31 --chunk-rows 268435456 --runs 1 > $out/chunked.txt 2> $out/chunked.err
echo "2^28-row chunks rc=$? at $(el) s"; cat $out/chunked.txt; tail -2 $out/chunked.err
left=$(( 590 - $(el) ))
timeout $left /tmp/b/lib-tests --test-threads 4 --exact $(cat $here/rest-of-suite.txt) > $out/lib-tests.log 2>&1
echo "rest of the suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
gzip $out/*.log $out/*.err; tar czf $OUT/o103.tar.gz -C $out .
