#!/usr/bin/env bash
# Session 25 call 6 (two H200s): the out-of-core SQL join (bench triton, 2^27 x 2^28, build state
# 4x and 8x the limit) on one GPU and with its partitions dealt over both, after the benchmark
# sums the spilled bytes over the whole plan (call 5 read them from the root only: 0).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o106; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.xz > /tmp/b/cli; chmod +x /tmp/b/cli
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
for devices in "" "0,1"; do
  left=$(( 280 - $(el) )); [ $left -lt 40 ] && { echo "no time for devices '$devices'"; break; }
  label=${devices:-one}; label=${label/,/-}
  timeout $left /tmp/b/cli bench triton --log-r 27 --log-s 28 --factors 4,8 --runs 3 --cpu-runs 0 --devices "$devices" > $out/triton-$label.txt 2> $out/triton-$label.err
  echo "triton devices '$devices' rc=$? at $(el) s"; tail -7 $out/triton-$label.txt
done
gzip $out/*.err; tar czf $OUT/o106.tar.gz -C $out .
