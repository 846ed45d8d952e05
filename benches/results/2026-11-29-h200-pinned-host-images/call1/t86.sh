#!/usr/bin/env bash
# Session 20 call 1: host images in page-locked memory (gpu.table_cache.host_image_pinned).
# The GPU suite on the build; cold SSB SF10 with pinned images and with pageable ones (same call),
# cold TPC-H SF10 with pinned images (10 runs a query, every answer checked); timeline of cold
# q1.1 and q4.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o86; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
( timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait; echo "data at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
grep -hiE "generat|wrote|parquet" $out/gen-*.log | head -6
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--gpu-set "$kv"); done
  timeout 90 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold "${sets[@]}" --out $out/records --label cold-$label > $out/$suite-cold-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-cold-$label.log) $(grep -ho 'host images[^)]*)[^)]*), placed in [0-9.]* s' $out/$suite-cold-$label.log)"
  grep -E "^q[0-9.]+ " $out/$suite-cold-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
run ssb pinned gpu.table_cache.host_image_pinned=true
run ssb pageable gpu.table_cache.host_image_pinned=false
[ $(el) -lt 470 ] && run tpch pinned gpu.table_cache.host_image_pinned=true
[ $(el) -lt 540 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,4.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
grep -E 'upload: [0-9]+ pieces, [0-9.]+[MG]iB' $out/ssb-cold-timeline.log | cut -c60- | tail -4
gzip $out/*.log
cd $out && tar czf $OUT/t86.tar.gz .
