#!/usr/bin/env bash
# Session 21 call 6: after the review mends (f737584, 2ad6d63), the GPU suite and the distributed
# test (every TPC-H and SSB query at SF 0.1 through 2 and 4 in-process workers sharing the GPU,
# against single-process DataFusion), with each staged plan written out.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o96; rm -rf $out; mkdir -p $out/plans /tmp/b
for f in dfg-tests dist-tests; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)" > $out/lscpu.txt
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
DFG_DISTRIBUTED_WORKERS=2,4 DFG_DISTRIBUTED_PLANS=$out/plans timeout 240 /tmp/b/dist-tests --nocapture > $out/dist.log 2>&1; echo "distributed test rc=$? at $(el) s"
grep -E "seed|runs:|^test result|panicked|answers otherwise" $out/dist.log | head -10
grep -c "Gpu" $out/plans/tpch-q3-2w.txt; head -60 $out/plans/tpch-q3-2w.txt | cut -c1-200
for f in $out/plans/*-2w.txt; do printf "%s %s\n" $(basename $f .txt) $(grep -cE "Gpu(HashJoin|Aggregate|FilterProject)Exec" $f); done | paste -sd' ' | fold -w 200
gzip $out/*.log
cd $out && tar czf $OUT/t96.tar.gz .
