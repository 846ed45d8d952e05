#!/usr/bin/env bash
# Session 22 call 6: the GPU join, rule and recovery tests on the final build (1bfa415: the
# kept-build helper shared by both build paths).
set -uo pipefail
mkdir -p /tmp/b; xz -dc .device6/lib-tests.xz > /tmp/b/lib-tests; chmod +x /tmp/b/lib-tests
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for f in join:: exec::join rule:: exec::recovery; do timeout 100 /tmp/b/lib-tests --test-threads 4 $f 2>&1 | grep -E "^test result|FAILED|panicked"; done
