# ===== call1/t91.sh
#!/usr/bin/env bash
# Session 24 call 1 (one H200): GPU operators' partitions spread over a device set
# (gpu.devices_spread_partitions). The whole GPU suite; TPC-H and SSB SF1 with every eligible
# operator on the GPU over two logical devices of GPU 0 ('0,0'), answers checked; the fuzzer
# over '0,0'.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o91; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 380 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|multi-GPU join differential: [0-9]+ joins" $out/lib-tests.log | head -20
force=(--gpu-set gpu.devices=0,0 --gpu-set gpu.placement=always --gpu-set gpu.cost.min_rows=0)
for suite in tpch ssb; do
  left=$(( 560 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite"; break; }
  timeout $left /tmp/b/cli bench $suite --sf 1 --data /tmp/dfg-data --iterations 1 --cpu-iterations 0 --label $suite-sf1-two-logical --out $out/$suite "${force[@]}" > $out/$suite.txt 2> $out/$suite.err
  echo "$suite rc=$? at $(el) s"; grep -E "results:|MISMATCH|mismatch|error" $out/$suite.txt | head -5
done
left=$(( 585 - $(el) ))
[ $left -gt 20 ] && timeout $left /tmp/b/cli fuzz --queries 400 --seed $RANDOM --gpu-set gpu.devices=0,0 --max-failures 5 > $out/fuzz.txt 2> $out/fuzz.err
echo "fuzz rc=$? at $(el) s"; tail -4 $out/fuzz.txt
gzip $out/*.log $out/*.err; tar czf $OUT/o91.tar.gz -C $out .
# ===== call2/t92.sh
#!/usr/bin/env bash
# Session 24 call 2 (two H200s): partitions spread over both GPUs (gpu.devices = '0,1',
# gpu.devices_spread_partitions on). The placement tests; the fuzzer over the two GPUs (real peer
# copies); TPC-H and SSB SF30 on one GPU against both, answers checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o92; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 60 /tmp/b/lib-tests --test-threads 2 placed partitions_upload device:: > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"; grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head
timeout 80 /tmp/b/cli fuzz --queries 300 --seed $RANDOM --gpu-set gpu.devices=0,1 --max-failures 5 > $out/fuzz.txt 2> $out/fuzz.err
echo "fuzz rc=$? at $(el) s"; tail -2 $out/fuzz.txt
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local left=$(( 585 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite $label"; return; }
  timeout $left /tmp/b/cli bench $suite --sf 30 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label $suite-sf30-$label --out $out/$suite-$label "$@" > $out/$suite-$label.txt 2> $out/$suite-$label.err
  echo "$suite $label rc=$? at $(el) s"; grep -E "results:" $out/$suite-$label.txt
}
run tpch one
run tpch spread --gpu-set gpu.devices=0,1
run ssb one
run ssb spread --gpu-set gpu.devices=0,1
gzip $out/*.log $out/*.err; tar czf $OUT/o92.tar.gz -C $out .
# ===== call3/t93.sh
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
# ===== call4/t94.sh
#!/usr/bin/env bash
# Session 24 call 4 (two H200s), after capping each device's staging rings at 16 (call 3 found
# SSB q2.1 over both GPUs pinning new staging slots one after another in its timed run): the
# device, transfer and upload tests; SSB and TPC-H SF30 over both GPUs (partitions spread) and
# on one, answers checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o94; rm -rf $out; mkdir -p $out /tmp/b
for f in lib-tests cli; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 70 /tmp/b/lib-tests --test-threads 2 device:: transfer upload > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"; grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local left=$(( 515 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite $label"; return; }
  timeout $left /tmp/b/cli bench $suite --sf 30 --data /tmp/dfg-data --iterations 2 --cpu-iterations 0 --label $suite-sf30-$label --out $out/$suite-$label "$@" > $out/$suite-$label.txt 2> $out/$suite-$label.err
  echo "$suite $label rc=$? at $(el) s"; grep -E "results:" $out/$suite-$label.txt
}
run ssb spread --gpu-set gpu.devices=0,1
run ssb one
run tpch spread --gpu-set gpu.devices=0,1
run tpch one
gzip $out/*.log $out/*.err; tar czf $OUT/o94.tar.gz -C $out .
