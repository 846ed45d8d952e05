#!/usr/bin/env bash
# Call 3: the cases at four gpu.memory_limit values (next to the SSB SF10 generation),
# then SSB SF10 A/B (5fe6206 against this build, A B A B, 1 timed run after a checked one).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
mkdir -p /tmp/b; xz -dc .device/pair.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/dfg-*
ln -sf /tmp/b/dfg-new /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1
( XDG_CACHE_HOME=/tmp/dfg-cache-new timeout 200 /tmp/b/dfg-new bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > /tmp/ssb-gen.log 2>&1; echo "ssb data rc=$? at $(el) s" ) &
( XDG_CACHE_HOME=/tmp/dfg-cache-cases timeout 260 bash .device/cases.sh > /tmp/cases.log 2>&1; echo "cases rc=$? at $(el) s" ) &
wait
cp /tmp/cases.log /tmp/ssb-gen.log $OUT/
RUN_TIMEOUT=110 bash .device/ab.sh ssb 2 1
echo "all done at $(el) s"; cat /tmp/cases.log
