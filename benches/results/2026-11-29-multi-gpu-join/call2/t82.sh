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
