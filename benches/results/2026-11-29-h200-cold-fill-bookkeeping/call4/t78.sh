#!/usr/bin/env bash
# Session 18 call 4: the GPU suite on the final build (b62d265); every TPC-H and SSB query at
# SF1 over GpuCachedTable with the defaults, answers checked against DataFusion.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o78; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 450 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|failed" $out/tests.log | head -10
grep -c '^test .* ok$' $out/tests.log
for suite in tpch ssb; do
  timeout 60 $cli bench $suite --sf 1 --iterations 1 --cpu-iterations 0 --residency cached --no-save > $out/$suite-sf1.log 2>&1
  echo "$suite SF1 rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1.log)"
done
gzip $out/*.log
cd $out && tar czf $OUT/t78.tar.gz .
