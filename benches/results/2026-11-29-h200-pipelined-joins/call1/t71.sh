#!/usr/bin/env bash
# Session 22 call 1: the GPU suite and the distributed differential test (2 and 4 workers) after
# the pipelined join inputs, the link and the staged plans without fallback notes.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o71; rm -rf $out; mkdir -p $out/plans /tmp/b
for f in lib-tests dist-tests; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 380 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
DFG_DISTRIBUTED_WORKERS=2,4 DFG_DISTRIBUTED_PLANS=$out/plans timeout 150 /tmp/b/dist-tests --nocapture > $out/dist-tests.log 2>&1
echo "dist rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head -20
grep -E "seed|^test result|FAILED|panicked|staged|GPU op" $out/dist-tests.log | head -20
grep -E "pipelined_and_blocking" $out/lib-tests.log
gzip $out/*.log; tar czf $out/plans.tar.gz -C $out plans && rm -rf $out/plans
cp -r $out/. $OUT/
