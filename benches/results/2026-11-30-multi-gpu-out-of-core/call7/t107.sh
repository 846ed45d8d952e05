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
