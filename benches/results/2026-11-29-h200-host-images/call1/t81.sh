#!/usr/bin/env bash
# Session 19 call 1: host images of cached tables. The GPU suite on the build; every TPC-H and
# SSB query at SF1 over GpuCachedTable with the defaults (host images on), answers checked; cold
# SSB SF10 with host images on and off (same process data, 10 runs a query, answers checked);
# timeline of cold q1.1 with images.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o81; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 60 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait
grep -E "^test result|FAILED|panicked|failed" $out/tests.log | head -10
grep -c '^test .* ok$' $out/tests.log
for suite in tpch ssb; do
  timeout 50 $cli bench $suite --sf 1 --iterations 1 --cpu-iterations 0 --residency cached --no-save > $out/$suite-sf1.log 2>&1
  echo "$suite SF1 rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1.log) $(grep -ho 'host images[^)]*)' $out/$suite-sf1.log) $(grep -ho 'placed in [0-9.]* s' $out/$suite-sf1.log)"
done
for img in true false; do
  [ $(el) -gt 480 ] && break
  timeout 75 $cli bench ssb --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --gpu-set table_cache.host_image=$img --out $out/records --label cold-image-$img > $out/ssb-cold-image-$img.log 2>&1
  echo "ssb image=$img rc=$? at $(el) s: $(grep -h 'results:' $out/ssb-cold-image-$img.log) $(grep -ho 'host images[^)]*)' $out/ssb-cold-image-$img.log) $(grep -ho 'placed in [0-9.]* s' $out/ssb-cold-image-$img.log)"
done
[ $(el) -lt 540 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t81.tar.gz .
