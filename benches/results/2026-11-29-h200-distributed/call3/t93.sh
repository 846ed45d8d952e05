#!/usr/bin/env bash
# Session 21 call 3: SSB SF10 single-process and through 2 local workers sharing the GPU (3 timed
# GPU runs, 1 CPU run a query after one checked run), then TPC-H SF10 through 2 workers once more
# with the staged plans and every task's metrics printed (--explain) and the bytes its network
# boundaries received.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o93; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
timeout 150 $cli bench ssb --sf 10 --iterations 3 --cpu-iterations 1 --data /tmp/dfg-data --out $out/records --label single > $out/ssb-single.log 2>&1
echo "ssb single rc=$? at $(el) s: $(grep -h 'results:' $out/ssb-single.log)"
wait
timeout 240 $cli bench ssb --sf 10 --iterations 3 --cpu-iterations 1 --data /tmp/dfg-data --local-workers 2 --out $out/records --label 2-workers > $out/ssb-2w.log 2>&1
echo "ssb 2 workers rc=$? at $(el) s: $(grep -h 'results:' $out/ssb-2w.log)"
left=$(( 560 - $(el) ))
[ $left -gt 60 ] && timeout $left $cli bench tpch --sf 10 --iterations 1 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label 2-workers-explain > $out/tpch-2w-explain.log 2>&1
echo "tpch explain rc=$? at $(el) s: $(grep -h 'results:' $out/tpch-2w-explain.log)"
for f in ssb-single ssb-2w; do echo "== $f"; grep -E "^q[0-9.]+ |geomean|total" $out/$f.log | cut -c1-70; done
echo "== tpch 2w explain"; grep -E "^q[0-9]+ " $out/tpch-2w-explain.log | cut -c1-60
gzip $out/*.log
cd $out && tar czf $OUT/t93.tar.gz .
