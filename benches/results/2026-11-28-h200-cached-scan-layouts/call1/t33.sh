#!/usr/bin/env bash
# Session 11 call 1: where a short query's host time goes. SF10 SSB and TPC-H over GpuCachedTable:
# sampling profiles (bench --profile) of short queries; then the CLI's GPU-only timings under
# the driver's host wait modes (DFG_CUDA_SYNC=auto|blocking|yield).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o33; rm -rf $out; mkdir -p $out/prof /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc; echo "ready at $(el) s"
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
timeout 120 $cli bench ssb --sf 10 --iterations 1 --queries 1.1,2.1,3.4,4.3 --data /tmp/dfg-data --residency cached --profile $out/prof --profile-runs 30 --no-save > $out/ssb-profile.log 2>&1
echo "ssb profile rc=$? at $(el) s"; grep -E "^q[0-9.]+ |samples" $out/ssb-profile.log
timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout 120 $cli bench tpch --sf 10 --iterations 1 --queries 1,2,11,17 --data /tmp/dfg-data --residency cached --profile $out/prof --profile-runs 10 --no-save > $out/tpch-profile.log 2>&1
echo "tpch profile rc=$? at $(el) s"; grep -E "^q[0-9.]+ |samples" $out/tpch-profile.log
left=$(( 585 - $(el) ))
[ $left -gt 90 ] && BUDGET_S=$left timeout $left python3 .device/variants.py $out $cli auto= blocking=DFG_CUDA_SYNC=blocking yield=DFG_CUDA_SYNC=yield auto2=
echo "done at $(el) s"
cd $out && tar czf $OUT/t33.tar.gz --exclude='*.sql' .
