#!/usr/bin/env bash
# Session 15 call 4 (and 6, after the review mend): the GPU suite on the final code (the join-input fuse under dropped
# round-robin repartitions included).
set -uo pipefail
out=/tmp/o63; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/lib.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 285 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$?"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
gzip $out/*.log; cd $out && tar czf $OUT/t63.tar.gz .
