#!/usr/bin/env bash
# Same-machine A/B at SF10: 5fe6206 (A) against the carried build (B), alternating A B A B ...,
# each build with a kernel cache of its own; per-query GPU medians of every run print last.
#   usage: .device/ab.sh SUITE ROUNDS [ITERATIONS]
set -uo pipefail
suite=$1 rounds=$2 it=${3:-2}
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/ab-$suite; rm -rf $out; mkdir -p $out/records /tmp/b
[ -x /tmp/b/dfg-new ] || { xz -dc .device/pair.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/dfg-*; }
source scripts/device-env.sh >/dev/null
export DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
[ -d /tmp/dfg-data/$suite-sf10 ] || XDG_CACHE_HOME=/tmp/dfg-cache-new timeout 150 /tmp/b/dfg-new bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen.log 2>&1
echo "data at $(el) s"
n=0
for r in $(seq $rounds); do for v in 5fe6206 new; do
  n=$((n+1))
  XDG_CACHE_HOME=/tmp/dfg-cache-$v timeout ${RUN_TIMEOUT:-170} /tmp/b/dfg-$v bench $suite --sf 10 --iterations $it --data /tmp/dfg-data \
      --out $out/records --label $v-$n > $out/run$n-$v.log 2>&1
  echo "run $n $v rc=$? at $(el) s: $(grep -h 'total:' $out/run$n-$v.log) $(grep -h 'results:' $out/run$n-$v.log)"
done; done
cd $out && tar czf $OUT/ab-$suite.tar.gz . ; cd - >/dev/null
echo "GPU ms per query, runs 1..$n (A=5fe6206 odd, B=new even):"
for q in $(grep -hoE '^q[0-9.]+ ' $out/run1-5fe6206.log); do
  printf '%-6s' $q; for f in $(ls $out/run*-*.log | sort -V); do printf ' %7s' "$(grep -E "^$q " $f | awk '{print $3}')"; done; echo
done
