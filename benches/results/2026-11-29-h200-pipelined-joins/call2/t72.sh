#!/usr/bin/env bash
# Session 22 call 2: TPC-H q9 and q18 at SF10 through 2 local workers whose shuffles cross a
# 10 Gb/s link (--link-gbps 10), GPU joins pipelined against blocking; the same over the
# loopback; then every TPC-H and SSB query through 2 workers for shuffle bytes and join times.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o72; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records"
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 110 $cli bench tpch $w --queries 9,18 --iterations 3 --cpu-iterations 1 --link-gbps 10 --explain $set_ --label link10-$mode > $out/link10-$mode.log 2>&1
  echo "link10 $mode rc=$? at $(el) s"
done
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 70 $cli bench tpch $w --queries 9,18 --iterations 3 --cpu-iterations 1 $set_ --label loopback-$mode > $out/loopback-$mode.log 2>&1
  echo "loopback $mode rc=$? at $(el) s"
done
timeout 130 $cli bench tpch $w --iterations 1 --cpu-iterations 1 --explain --label all-2-workers > $out/tpch-all.log 2>&1
echo "tpch all rc=$? at $(el) s"
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data $D --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
timeout 90 $cli bench ssb $w --iterations 1 --cpu-iterations 1 --explain --label all-2-workers > $out/ssb-all.log 2>&1
echo "ssb all rc=$? at $(el) s"
for f in link10-pipelined link10-blocking loopback-pipelined loopback-blocking; do echo "== $f"; grep -E "^q[0-9.]+ +[0-9]" $out/$f.log | cut -c1-70; grep -A8 "^GPU joins" $out/$f.log | grep -E "^q" ; done
grep -hE "^q[0-9.]+ +[0-9]" $out/tpch-all.log $out/ssb-all.log | cut -c1-70
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log
cp -r $out/. $OUT/
