#!/usr/bin/env bash
# Session 23 call 1 (one H200): the GPU suite with the multi-GPU join's differential test on 2
# and 4 logical devices; doctor's copy matrix over logical devices; a small bench multi-gpu on
# logical devices (mechanics and overhead only: one GPU does all the work).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o81; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 /tmp/b/lib-tests --test-threads 1 multi_gpu --nocapture > $out/multi.log 2>&1
echo "multi rc=$? at $(el) s"
grep -E "^test |test result|multi-GPU join differential|MISMATCH|panicked" $out/multi.log | head -30
timeout 40 /tmp/b/cli doctor --devices 0,0 > $out/doctor.txt 2>&1; echo "doctor rc=$? at $(el) s"; tail -6 $out/doctor.txt
timeout 60 /tmp/b/cli bench multi-gpu --ordinals 0,0,0,0 --log-rows 24,26 --gpus 1,2,4 --runs 2 > $out/bench-logical.txt 2> $out/bench-logical.err; echo "bench rc=$? at $(el) s"; cat $out/bench-logical.txt; tail -3 $out/bench-logical.err
timeout $(( 575 - $(el) )) /tmp/b/lib-tests --test-threads 4 --skip multi_gpu > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head -20
gzip $out/*.log $out/*.err; tar czf $OUT/o81.tar.gz -C $out .
