#!/usr/bin/env bash
# Session 17 call 4: the GPU suite on the final build (the review mend: the frame-of-reference
# sample taken lazily, one widen launch), SF10 data generated beside it; `bench transfer` (the
# host's copy rate into pinned memory, for the cold floors); SSB and TPC-H SF10 over
# GpuCachedTable, cache emptied before each timed GPU run (--cold), 3 timed runs a query.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o74; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
( timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
wait; echo "data at $(el) s"
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  timeout 100 $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label $label "$@" > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-$label.log) $(grep -h 'results:' $out/$suite-$label.log)"
  grep -E "^q[0-9.]+ +[-0-9]" $out/$suite-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
timeout 60 $cli bench transfer > $out/transfer.log 2>&1; echo "transfer rc=$? at $(el) s"
grep -iE "copy|staged|registered|download" $out/transfer.log | head -12
run tpch cold
run ssb cold
gzip $out/*.log
cd $out && tar czf $OUT/t74.tar.gz .
