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
