#!/usr/bin/env bash
# Session 21 call 4: the runner's bytes over the wire (bytes_transferred of every network
# boundary) and staged per-task metrics, TPC-H SF10 q1, q3, q9, q18 and SSB q4.1 through 2 local
# workers, one timed run each after the checked one.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o94; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
timeout 200 $cli bench tpch --sf 10 --iterations 1 --queries 1,3,9,18 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label net > $out/tpch-net.log 2>&1
echo "tpch rc=$? at $(el) s"
timeout 120 $cli bench ssb --sf 10 --iterations 1 --queries 4.1 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label net > $out/ssb-net.log 2>&1
echo "ssb rc=$? at $(el) s"
grep -hE "^q[0-9.]+ +[0-9]" $out/tpch-net.log $out/ssb-net.log | cut -c1-75
grep -h "net MiB:" $out/tpch-net.log | head -1
gzip $out/*.log
cd $out && tar czf $OUT/t94.tar.gz .
