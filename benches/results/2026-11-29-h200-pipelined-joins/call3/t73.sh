#!/usr/bin/env bash
# Session 22 call 3: TPC-H q9 and q18 at SF10 through 2 local workers whose shuffles cross a
# 10 Gb/s link (--link-gbps 10; the link's timer fixed after call 2), GPU joins pipelined against
# blocking; then the same at 1 Gb/s.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o73; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records --queries 9,18 --cpu-iterations 1"
for gbps in 10 1; do
  it=3; [ $gbps = 1 ] && it=2
  for mode in pipelined blocking; do
    set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
    timeout 150 $cli bench tpch $w --iterations $it --link-gbps $gbps --explain $set_ --label link$gbps-$mode > $out/link$gbps-$mode.log 2>&1
    echo "link$gbps $mode rc=$? at $(el) s"
  done
done
for f in link10-pipelined link10-blocking link1-pipelined link1-blocking; do echo "== $f"; grep -E "^q[0-9.]+ +[0-9]" $out/$f.log | cut -c1-70; grep -A8 "^GPU joins" $out/$f.log | grep -E "^q" ; done
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log
tar czf $OUT/o73.tar.gz -C $out .
