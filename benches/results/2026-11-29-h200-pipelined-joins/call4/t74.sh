#!/usr/bin/env bash
# Session 22 call 4: every TPC-H and SSB query at SF10 through 2 local workers over the loopback
# (shuffle bytes, each GPU join's input and end times, the staged plans with per-task metrics),
# then every TPC-H query over the 10 Gb/s link, GPU joins pipelined and blocking.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o74; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data $D --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records --iterations 1 --cpu-iterations 1"
timeout 130 $cli bench tpch $w --explain --label loopback > $out/tpch-loopback.log 2>&1
echo "tpch loopback rc=$? at $(el) s"
timeout 60 $cli bench ssb $w --explain --label loopback > $out/ssb-loopback.log 2>&1
echo "ssb loopback rc=$? at $(el) s"
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 140 $cli bench tpch $w --link-gbps 10 $set_ --label link10-$mode > $out/tpch-link10-$mode.log 2>&1
  echo "tpch link10 $mode rc=$? at $(el) s"
done
for f in tpch-loopback ssb-loopback tpch-link10-pipelined tpch-link10-blocking; do echo "== $f"; grep -E "^(total|geometric)" $out/$f.log; done
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log
tar czf $OUT/o74.tar.gz -C $out .
