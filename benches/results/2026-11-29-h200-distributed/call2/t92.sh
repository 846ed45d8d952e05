#!/usr/bin/env bash
# Session 21 call 2: the codec test on the device (GPU execs come back as GPU execs), then TPC-H
# SF10 single-process (DataFusion against the GPU rule) and through 2 local workers sharing the
# GPU (DataFusion Distributed with the rule off against it on), 3 timed runs a query after one
# checked run, from the same Parquet.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o92; rm -rf $out; mkdir -p $out/records /tmp/b
for f in plan-tests datafusion-gpu; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 60 /tmp/b/plan-tests --nocapture > $out/plan-tests.log 2>&1; echo "codec tests rc=$? at $(el) s"
grep -E "carried|^test result|panicked" $out/plan-tests.log | head -5
wait; echo "data at $(el) s"
timeout 170 $cli bench tpch --sf 10 --iterations 3 --data /tmp/dfg-data --out $out/records --label single > $out/tpch-single.log 2>&1
echo "single rc=$? at $(el) s: $(grep -h 'results:' $out/tpch-single.log)"
timeout 330 $cli bench tpch --sf 10 --iterations 3 --data /tmp/dfg-data --local-workers 2 --out $out/records --label 2-workers > $out/tpch-2w.log 2>&1
echo "2 workers rc=$? at $(el) s: $(grep -h 'results:' $out/tpch-2w.log)"
for f in single 2w; do echo "== $f"; grep -E "^q[0-9]+ |geomean|Both" $out/tpch-$f.log | cut -c1-80; done
gzip $out/*.log
cd $out && tar czf $OUT/t92.tar.gz .
