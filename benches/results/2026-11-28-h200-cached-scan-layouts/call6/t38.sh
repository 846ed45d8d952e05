#!/usr/bin/env bash
# Session 11 call 6: the GPU suite on the final library (7385108: cached scan layouts' batch size in one place).
set -uo pipefail
mkdir -p /tmp/b && xz -dc .device3/lib.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 300 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 3 > $OUT/tests.log 2>&1; echo "GPU suite rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/tests.log | head -10
