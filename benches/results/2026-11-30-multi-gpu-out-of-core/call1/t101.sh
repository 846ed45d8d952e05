#!/usr/bin/env bash
# Session 25 call 1 (one H200): main 4dd10cd as committed, which had not run on a GPU: the whole
# GPU suite and the sql-tests (GPU rule off, on, on two logical devices with partitions spread).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o101; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests slt; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 /tmp/b/slt > $out/slt.log 2>&1
echo "slt rc=$? at $(el) s"; tail -3 $out/slt.log
timeout 420 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
gzip $out/*.log; tar czf $OUT/o101.tar.gz -C $out .
