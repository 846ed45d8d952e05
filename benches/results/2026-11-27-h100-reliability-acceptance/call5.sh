#!/usr/bin/env bash
# Call 5: q17 and q18 at SF10, ABAB (5fe6206 = A, main = B), 5 timed runs each.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/records
source scripts/device-env.sh >/dev/null
export DFG_REQUIRE_GPU=1
t0=$(date +%s)
[ -d /tmp/dfg-data/tpch-sf10 ] || XDG_CACHE_HOME=/tmp/dfg-cache-main timeout 80 /tmp/b/datafusion-gpu-new bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen.log 2>&1
echo "data $(( $(date +%s) - t0 )) s"
n=0
for b in old new old new; do n=$((n+1)); label=$([ $b = old ] && echo 5fe6206 || echo main)
  XDG_CACHE_HOME=/tmp/dfg-cache-$label timeout 45 /tmp/b/datafusion-gpu-$b bench tpch --sf 10 --queries 17,18 --iterations 5 --data /tmp/dfg-data --no-save > $out/q1718-$n-$label.log 2>&1
  echo "run $n $label rc=$?"; grep -E "^q1[78] |total" $out/q1718-$n-$label.log
done
cd $out && tar czf $OUT/logs.tar.gz .
