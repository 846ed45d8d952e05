#!/usr/bin/env bash
# Call 2: TPC-H SF10 A/B (5fe6206 against this build, A B A B, 2 timed runs after a checked one),
# then 10,000 fuzz queries (8 seeds at once) on this build.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
RUN_TIMEOUT=150 bash .device/ab.sh tpch 2 2
echo "A/B done at $(el) s"
out=/tmp/fz; rm -rf $out; mkdir -p $out
left=$(( 585 - $(el) ))
for s in 301 302 303 304 305 306 307 308; do
  ( XDG_CACHE_HOME=/tmp/dfg-cache-new timeout $left /tmp/b/dfg-new fuzz --queries 1250 --seed $s --repro-dir $out/repro-$s > $out/fuzz-seed$s.log 2>&1; echo "seed $s rc=$? at $(el) s" >> $out/rc.txt ) &
done
wait
cd $out && tar czf $OUT/fuzz.tar.gz . ; cd - >/dev/null
sort $out/rc.txt; for f in $out/fuzz-seed*.log; do tail -2 $f | tr '\n' ' '; echo; done
