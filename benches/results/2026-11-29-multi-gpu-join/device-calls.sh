# ===== call1/t81.sh
#!/usr/bin/env bash
# Session 23 call 1 (one H200): the GPU suite with the multi-GPU join's differential test on 2
# and 4 logical devices; doctor's copy matrix over logical devices; a small bench multi-gpu on
# logical devices (mechanics and overhead only: one GPU does all the work).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o81; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 /tmp/b/lib-tests --test-threads 1 multi_gpu --nocapture > $out/multi.log 2>&1
echo "multi rc=$? at $(el) s"
grep -E "^test |test result|multi-GPU join differential|MISMATCH|panicked" $out/multi.log | head -30
timeout 40 /tmp/b/cli doctor --devices 0,0 > $out/doctor.txt 2>&1; echo "doctor rc=$? at $(el) s"; tail -6 $out/doctor.txt
timeout 60 /tmp/b/cli bench multi-gpu --ordinals 0,0,0,0 --log-rows 24,26 --gpus 1,2,4 --runs 2 > $out/bench-logical.txt 2> $out/bench-logical.err; echo "bench rc=$? at $(el) s"; cat $out/bench-logical.txt; tail -3 $out/bench-logical.err
timeout $(( 575 - $(el) )) /tmp/b/lib-tests --test-threads 4 --skip multi_gpu > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head -20
gzip $out/*.log $out/*.err; tar czf $OUT/o81.tar.gz -C $out .
# ===== call2/t82.sh
#!/usr/bin/env bash
# Session 23 call 2 (two H200s): doctor's copy matrix over both GPUs; bench multi-gpu (workload B,
# 2^26, 2^28, 2^30 rows a side) on 1 and 2 GPUs; TPC-H SF10 on one GPU against both (auto, and
# every GPU join forced to smj_multi_gpu), answers checked against DataFusion.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o82; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.xz > /tmp/b/cli; chmod +x /tmp/b/cli
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nvidia-smi topo -m > $out/topo.txt 2>&1; head -4 $out/topo.txt
nproc; free -g | head -2
timeout 60 /tmp/b/cli doctor --devices 0,1 > $out/doctor.txt 2>&1; echo "doctor rc=$? at $(el) s"; tail -7 $out/doctor.txt
timeout 240 /tmp/b/cli bench multi-gpu --ordinals 0,1 --log-rows 26,28,30 --gpus 1,2 --runs 2 > $out/bench.txt 2> $out/bench.err; echo "bench rc=$? at $(el) s"; cat $out/bench.txt; grep -E "generated|error|Error" $out/bench.err | head
d=/tmp/dfg-data
for cfg in one auto forced; do
  case $cfg in
    one) set_args=() ;;
    auto) set_args=(--gpu-set gpu.devices=0,1) ;;
    forced) set_args=(--gpu-set gpu.devices=0,1 --gpu-set gpu.join.algorithm=smj_multi_gpu) ;;
  esac
  left=$(( 580 - $(el) )); [ $left -lt 30 ] && { echo "no time for $cfg"; break; }
  timeout $left /tmp/b/cli bench tpch --sf 10 --data $d --iterations 2 --cpu-iterations 0 --label tpch-$cfg --out $out/tpch-$cfg "${set_args[@]}" > $out/tpch-$cfg.txt 2> $out/tpch-$cfg.err
  echo "tpch $cfg rc=$? at $(el) s"; grep -iE "total|mismatch|differ|wrong" $out/tpch-$cfg.txt | head -5
done
gzip $out/*.err; tar czf $OUT/o82.tar.gz -C $out .
# ===== call3/t83.sh
#!/usr/bin/env bash
# Session 23 call 3 (two H200s), after granting each GPU's memory pool to the other (call 2's
# copies between the GPUs went through host memory at 38 GB/s): the GPU suite (every test, the
# multi-GPU join on 2 and 4 logical devices included); doctor's copy matrix; bench multi-gpu on 1
# and 2 GPUs; TPC-H SF10 with every GPU join forced to smj_multi_gpu over both GPUs.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o83; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 400 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
timeout 40 /tmp/b/cli doctor --devices 0,1 > $out/doctor.txt 2>&1; echo "doctor rc=$? at $(el) s"; tail -5 $out/doctor.txt
timeout 120 /tmp/b/cli bench multi-gpu --ordinals 0,1 --log-rows 26,28,30 --gpus 1,2 --runs 2 > $out/bench.txt 2> $out/bench.err; echo "bench rc=$? at $(el) s"; cat $out/bench.txt; grep -E "error|Error" $out/bench.err | head
left=$(( 585 - $(el) ))
[ $left -gt 40 ] && timeout $left /tmp/b/cli bench tpch --sf 10 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label tpch-forced --out $out/tpch-forced --gpu-set gpu.devices=0,1 --gpu-set gpu.join.algorithm=smj_multi_gpu > $out/tpch-forced.txt 2> $out/tpch-forced.err
echo "tpch forced rc=$? at $(el) s"; grep -E "results:" $out/tpch-forced.txt
gzip $out/*.log $out/*.err; tar czf $OUT/o83.tar.gz -C $out .
# ===== call4/t84.sh
#!/usr/bin/env bash
# Session 23 call 4 (two H200s), same binaries as call 3: bench multi-gpu at 2^31 rows a side on
# 2 GPUs (one GPU cannot hold it in core); TPC-H SF30 on one GPU, on both with the cost model's
# choice (auto), and with every GPU join forced to smj_multi_gpu, answers checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o84; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.xz > /tmp/b/cli; chmod +x /tmp/b/cli
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 /tmp/b/cli bench multi-gpu --ordinals 0,1 --log-rows 31 --gpus 2 --runs 1 > $out/bench31.txt 2> $out/bench31.err; echo "bench31 rc=$? at $(el) s"; cat $out/bench31.txt; grep -vE "^\s*$" $out/bench31.err | tail -4
for cfg in one auto forced; do
  case $cfg in
    one) set_args=() ;;
    auto) set_args=(--gpu-set gpu.devices=0,1) ;;
    forced) set_args=(--gpu-set gpu.devices=0,1 --gpu-set gpu.join.algorithm=smj_multi_gpu) ;;
  esac
  left=$(( 585 - $(el) )); [ $left -lt 40 ] && { echo "no time for $cfg"; break; }
  timeout $left /tmp/b/cli bench tpch --sf 30 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label tpch-sf30-$cfg --out $out/tpch-$cfg "${set_args[@]}" > $out/tpch-$cfg.txt 2> $out/tpch-$cfg.err
  echo "tpch $cfg rc=$? at $(el) s"; grep -E "results:" $out/tpch-$cfg.txt
done
gzip $out/*.err; tar czf $OUT/o84.tar.gz -C $out .
# ===== call5/t85.sh
#!/usr/bin/env bash
# Session 23 call 5 (one H200), after peer access is enabled between every pair of a set and the
# model keeps smj_multi_gpu when it is the only candidate: the multi-GPU join's test on 2 and 4
# logical devices, and the device, cost, join and rule test groups.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o85; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/lib-tests.xz > /tmp/b/lib-tests; chmod +x /tmp/b/lib-tests
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 330 /tmp/b/lib-tests --test-threads 4 multi_gpu device:: cost:: join:: > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
gzip $out/*.log; tar czf $OUT/o85.tar.gz -C $out .
