# ===== call1/t101.sh
#!/usr/bin/env bash
# Session 25 call 1 (one H200): main 4dd10cd as committed, which had not run on a GPU: the whole
# GPU suite and the sql-tests (GPU rule off, on, on two logical devices with partitions spread).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o101; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests slt; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 /tmp/b/slt > $out/slt.log 2>&1
echo "slt rc=$? at $(el) s"; tail -3 $out/slt.log
timeout 420 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
gzip $out/*.log; tar czf $OUT/o101.tar.gz -C $out .
# ===== call2/t102.sh
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
# ===== call3/t103.sh
#!/usr/bin/env bash
# Session 25 call 3 (two H200s): the chunkset join's figures on 1 and 2 GPUs, with chunks as large
# as the devices allow (one chunkset per relation) and with chunks of 2^28 rows (several
# chunksets, the CPU merge); then the GPU tests that call 2's 360 s did not reach.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
here=benches/results/2026-11-30-multi-gpu-out-of-core/call3
out=/tmp/o103; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nvidia-smi topo -m > $out/topo.txt 2>&1; nproc; free -g | head -2
timeout 170 /tmp/b/cli bench chunksets --ordinals 0,1 --gpus 1,2 --log-rows 28,30,31 --runs 1 > $out/whole.txt 2> $out/whole.err
echo "whole chunks rc=$? at $(el) s"; cat $out/whole.txt
timeout 230 /tmp/b/cli bench chunksets --ordinals 0,1 --gpus 1,2 --log-rows 30,31 --chunk-rows 268435456 --runs 1 > $out/chunked.txt 2> $out/chunked.err
echo "2^28-row chunks rc=$? at $(el) s"; cat $out/chunked.txt; tail -2 $out/chunked.err
left=$(( 590 - $(el) ))
timeout $left /tmp/b/lib-tests --test-threads 4 --exact $(cat $here/rest-of-suite.txt) > $out/lib-tests.log 2>&1
echo "rest of the suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
gzip $out/*.log $out/*.err; tar czf $OUT/o103.tar.gz -C $out .
# ===== call5/t105.sh
#!/usr/bin/env bash
# Session 25 call 5 (two H200s): an out-of-core join's partitions dealt over the devices of a set
# (each joining its own over its own host link), pinned host memory made portable. The
# out-of-core, device, pinned and transfer tests (the new test over logical devices among them);
# then the out-of-core SQL join (bench triton, 2^27 x 2^28, build state 4x the limit) on one GPU
# and over both.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o105; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 270 /tmp/b/lib-tests --test-threads 4 out_of_core pinned transfer device:: registered > $out/lib-tests.log 2>&1
echo "tests rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|out-of-core joins" $out/lib-tests.log | head -12
for devices in "" "0,1"; do
  left=$(( 560 - $(el) )); [ $left -lt 40 ] && { echo "no time for devices '$devices'"; break; }
  label=${devices:-one}; label=${label/,/-}
  timeout $left /tmp/b/cli bench triton --log-r 27 --log-s 28 --factors 4 --runs 2 --cpu-runs 0 --devices "$devices" > $out/triton-$label.txt 2> $out/triton-$label.err
  echo "triton devices '$devices' rc=$? at $(el) s"; tail -8 $out/triton-$label.txt
done
gzip $out/*.log $out/*.err; tar czf $OUT/o105.tar.gz -C $out .
# ===== call6/t106.sh
#!/usr/bin/env bash
# Session 25 call 6 (two H200s): the out-of-core SQL join (bench triton, 2^27 x 2^28, build state
# 4x and 8x the limit) on one GPU and with its partitions dealt over both, after the benchmark
# sums the spilled bytes over the whole plan (call 5 read them from the root only: 0).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o106; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.xz > /tmp/b/cli; chmod +x /tmp/b/cli
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
for devices in "" "0,1"; do
  left=$(( 280 - $(el) )); [ $left -lt 40 ] && { echo "no time for devices '$devices'"; break; }
  label=${devices:-one}; label=${label/,/-}
  timeout $left /tmp/b/cli bench triton --log-r 27 --log-s 28 --factors 4,8 --runs 3 --cpu-runs 0 --devices "$devices" > $out/triton-$label.txt 2> $out/triton-$label.err
  echo "triton devices '$devices' rc=$? at $(el) s"; tail -7 $out/triton-$label.txt
done
gzip $out/*.err; tar czf $OUT/o106.tar.gz -C $out .
# ===== call7/t107.sh
#!/usr/bin/env bash
# Session 25 call 7 (two H200s): the largest workload B that fits the host's 251 GiB, 2^32 x 2^32
# rows (64 GiB a relation; about 192 GiB at the merge's peak), by the chunkset join on 1 and 2
# GPUs with chunks as large as the devices allow.
set -uo pipefail
out=/tmp/o107; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.xz > /tmp/b/cli; chmod +x /tmp/b/cli
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
free -g | head -2; ulimit -l
timeout 250 /tmp/b/cli bench chunksets --ordinals 0,1 --gpus 1,2 --log-rows 32 --runs 1 > $out/largest.txt 2> $out/largest.err
echo "rc=$?"; cat $out/largest.txt; tail -4 $out/largest.err
gzip $out/*.err; tar czf $OUT/o107.tar.gz -C $out .
