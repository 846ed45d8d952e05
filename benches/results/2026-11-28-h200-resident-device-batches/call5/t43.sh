#!/usr/bin/env bash
# Session 12 call 5: debug timelines of SSB q1.1 and q3.4 at SF10 over GpuCachedTable (device
# batches of 2^26 rows), planned in 16 partitions and in 1, to see what the 15 partitions that
# read no rows cost.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o43; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
[ -d /tmp/dfg-data/ssb-sf10 ] || timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
for p in 16 1; do
  left=$(( 270 - $(el) )); [ $left -lt 20 ] && break
  RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --queries 1.1,3.4 --partitions $p --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline-p$p.log 2>&1
  echo "p$p rc=$? at $(el) s"; grep -E "^q(1.1|3.4) " $out/ssb-timeline-p$p.log
done
gzip $out/*.log
cd $out && tar czf $OUT/t43.tar.gz .
