#!/usr/bin/env bash
# Session 25 call 2 (one H200): the chunkset join, the digit offsets' new shift argument and the
# measured copy bandwidth between a set's devices. The whole GPU suite (the chunkset join's
# differential test on 1, 2 and 4 logical devices among it); TPC-H and SSB SF1 over two logical
# devices with every eligible operator on the GPU, answers checked; the chunkset benchmark on 1
# and 2 logical devices at 2^26 (chunks of 2^24 rows: several chunksets, the CPU merge).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o102; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 60 /tmp/b/lib-tests --test-threads 1 chunkset gpu_set_bandwidth > $out/new-tests.log 2>&1
echo "new tests rc=$? at $(el) s"; grep -E "^test |test result|chunkset join differential|panicked" $out/new-tests.log | head -12
timeout 360 /tmp/b/lib-tests --test-threads 4 --skip chunkset --skip gpu_set_bandwidth > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
timeout 60 /tmp/b/cli bench chunksets --ordinals 0,0 --gpus 1,2 --log-rows 26 --chunk-rows 16777216 --runs 1 > $out/chunksets.txt 2> $out/chunksets.err
echo "chunksets rc=$? at $(el) s"; cat $out/chunksets.txt; tail -3 $out/chunksets.err
force=(--gpu-set gpu.devices=0,0 --gpu-set gpu.placement=always --gpu-set gpu.cost.min_rows=0)
for suite in tpch ssb; do
  left=$(( 570 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite"; break; }
  timeout $left /tmp/b/cli bench $suite --sf 1 --data /tmp/dfg-data --iterations 1 --cpu-iterations 0 --label $suite-sf1-two-logical --out $out/$suite "${force[@]}" > $out/$suite.txt 2> $out/$suite.err
  echo "$suite rc=$? at $(el) s"; grep -E "results:|MISMATCH|mismatch|error" $out/$suite.txt | head -5
done
gzip $out/*.log $out/*.err; tar czf $OUT/o102.tar.gz -C $out .
