#!/usr/bin/env bash
# Session 10 call 6: same-machine A/B through the CLI, b5c78a8 (datafusion-gpu-old) against
# 3ef25f4 (datafusion-gpu: GPU aggregates hand their output over on the device), SSB then TPC-H SF10.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o32; rm -rf $out; mkdir -p $out /tmp/ab
xz -dc .device/res.tar.xz | tar xf - -C /tmp/ab; chmod +x /tmp/ab/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
cli=/tmp/ab/datafusion-gpu
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
SUITES=ssb timeout $(( 400 - $(el) )) python3 .device/ab_cli.py $out /tmp/ab/datafusion-gpu-old $cli
echo "ssb a/b done at $(el) s"
left=$(( 420 - $(el) ))
if [ $left -gt 200 ]; then
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
  echo "tpch data at $(el) s"
  SUITES=tpch timeout $(( 430 - $(el) )) python3 .device/ab_cli.py $out /tmp/ab/datafusion-gpu-old $cli
fi
echo "done at $(el) s"
cd $out && tar czf $OUT/t32.tar.gz .
