#!/usr/bin/env bash
# Session 25 call 5 (two H200s): an out-of-core join's partitions dealt over the devices of a set
# (each joining its own over its own host link), pinned host memory made portable. The
# out-of-core, device, pinned and transfer tests (the new test over logical devices among them);
# then the out-of-core SQL join (bench triton, 2^27 x 2^28, build state 4x the limit) on one GPU
# and over both.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o105; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 270 /tmp/b/lib-tests --test-threads 4 out_of_core pinned transfer device:: registered > $out/lib-tests.log 2>&1
echo "tests rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|out-of-core joins" $out/lib-tests.log | head -12
for devices in "" "0,1"; do
  left=$(( 560 - $(el) )); [ $left -lt 40 ] && { echo "no time for devices '$devices'"; break; }
  label=${devices:-one}; label=${label/,/-}
  timeout $left /tmp/b/cli bench triton --log-r 27 --log-s 28 --factors 4 --runs 2 --cpu-runs 0 --devices "$devices" > $out/triton-$label.txt 2> $out/triton-$label.err
  echo "triton devices '$devices' rc=$? at $(el) s"; tail -8 $out/triton-$label.txt
done
gzip $out/*.log $out/*.err; tar czf $OUT/o105.tar.gz -C $out .
