#!/usr/bin/env bash
# Session 23 call 5 (one H200), after peer access is enabled between every pair of a set and the
# model keeps smj_multi_gpu when it is the only candidate: the multi-GPU join's test on 2 and 4
# logical devices, and the device, cost, join and rule test groups.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o85; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/lib-tests.xz > /tmp/b/lib-tests; chmod +x /tmp/b/lib-tests
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 330 /tmp/b/lib-tests --test-threads 4 multi_gpu device:: cost:: join:: > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
gzip $out/*.log; tar czf $OUT/o85.tar.gz -C $out .
