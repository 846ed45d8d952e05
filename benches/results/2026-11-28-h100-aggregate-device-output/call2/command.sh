#!/usr/bin/env bash
# Session 10 call 2 (792c27a's binary, on call 1's machine with its SF10 data): debug timelines and
# EXPLAIN ANALYZE of TPC-H q2, q11, q17, q20 over GpuCachedTable.
mkdir -p /tmp/b && xz -dc .device/res.tar.xz | tar xf - -C /tmp/b ./datafusion-gpu 2>/dev/null
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
RUST_LOG=datafusion_gpu::timeline=debug timeout 200 /tmp/b/datafusion-gpu bench tpch --sf 10 --iterations 2 \
  --queries 2,11,17,20 --data /tmp/dfg-data --residency cached --explain --no-save > $OUT/t28.log 2>&1
