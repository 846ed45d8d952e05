#!/usr/bin/env bash
# Session 12 call 2: same-machine A/B of the CLI before (session 11's, b8d6452's code) and after
# this session's changes, GPU only over gpu_cache'd SF10 tables; and the new CLI with fewer
# partitions and one device batch per partition (target_partitions 4 and 1, gpu.batch_rows 2^26).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o40; rm -rf $out; mkdir -p $out /tmp/b/old
xz -dc .device2/cli.tar.xz | tar xf - -C /tmp/b/old; xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*/* /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; old=/tmp/b/old/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
[ -d /tmp/dfg-data/ssb-sf10 ] || timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
[ -d /tmp/dfg-data/tpch-sf10 ] || timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data at $(el) s"
B="SET gpu.batch_rows = 67108864"
ROUNDS=2 BUDGET_S=$(( 585 - $(el) )) timeout $(( 588 - $(el) )) python3 .device4/settings.py $out old=$old new=$cli \
  "p4-b64M=$cli:SET datafusion.execution.target_partitions = 4;$B" "p1-b64M=$cli:SET datafusion.execution.target_partitions = 1;$B" 2>&1 | tail -45
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t40.tar.gz --exclude='*.sql' .
