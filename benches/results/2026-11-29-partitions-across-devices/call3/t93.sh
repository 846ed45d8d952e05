#!/usr/bin/env bash
# Session 24 call 3 (two H200s): call 2's SSB SF30 run with partitions spread over both GPUs
# did not finish in 283 s (one GPU: 43 s). SSB SF10 q1.1 spread, with the exec timeline logged,
# GPU utilisation sampled and the threads' states dumped if it is still running at 100 s.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o93; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.xz > /tmp/b/cli; chmod +x /tmp/b/cli
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
which gdb eu-stack 2>&1 | head -2
RUST_LOG=datafusion_gpu::timeline=debug /tmp/b/cli bench ssb --sf 10 --data /tmp/dfg-data --iterations 1 --cpu-iterations 0 --label spread --out $out/spread --queries 1.1,2.1 --gpu-set gpu.devices=0,1 > $out/spread.txt 2> $out/spread.log &
pid=$!
for i in $(seq 1 24); do
  sleep 5; kill -0 $pid 2>/dev/null || break
  echo "$(el) s: $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | tr '\n' ' ')" >> $out/smi.txt
done
if kill -0 $pid 2>/dev/null; then
  echo "still running at $(el) s"
  for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(cat $t/wchan 2>/dev/null) $(cat $t/stat | cut -d' ' -f3)"; done | sort | uniq -c | sort -rn > $out/threads.txt
  head -30 $out/threads.txt
  command -v gdb >/dev/null && timeout 60 gdb -p $pid -batch -ex "thread apply all bt 12" > $out/gdb.txt 2>&1
  kill $pid
fi
wait $pid; echo "spread rc=$? at $(el) s"
tail -5 $out/smi.txt; grep -E "results:|^q" $out/spread.txt
grep -c . $out/spread.log; tail -30 $out/spread.log | cut -c1-200
gzip $out/*.log; tar czf $OUT/o93.tar.gz -C $out .
