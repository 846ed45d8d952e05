#!/usr/bin/env bash
# Session 16 call 2: the cold path after parallel view assembly, with the upload's staging times
# in the timeline. SSB and TPC-H SF10 over GpuCachedTable (--residency cached), cache emptied
# before each timed GPU run (--cold), 3 timed runs a query; timelines of cold SSB q1.1, q4.1 and
# TPC-H q1, q6, q19.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o66; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  timeout 150 $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold > $out/$suite-cold.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold.log) $(grep -h 'results:' $out/$suite-cold.log)"
  grep -E "^q[0-9.]+ +[-0-9]" $out/$suite-cold.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 60 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,4.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline ssb at $(el) s"
grep -E "upload: |timed run|uploaded" $out/ssb-cold-timeline.log | tail -12 | cut -c45-300
RUST_LOG=datafusion_gpu::timeline=debug timeout 90 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 1,6,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timeline tpch at $(el) s"
grep -E "upload: |timed run|uploaded" $out/tpch-cold-timeline.log | tail -20 | cut -c45-300
gzip $out/*.log
cd $out && tar czf $OUT/t66.tar.gz .
