#!/usr/bin/env bash
# Session 22 call 5 (final build, with each stage's clock): the distributed differential test
# through 2 and 4 workers; every TPC-H and SSB query at SF10 through 2 local workers over the
# loopback (bytes, join times, stage times); TPC-H q9 and q18 over the 10 Gb/s link, GPU joins
# pipelined and blocking.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o75; rm -rf $out; mkdir -p $out/records $out/plans /tmp/b
for f in dist-tests datafusion-gpu; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
DFG_DISTRIBUTED_WORKERS=2,4 DFG_DISTRIBUTED_PLANS=$out/plans timeout 100 /tmp/b/dist-tests --nocapture > $out/dist-tests.log 2>&1
echo "dist rc=$? at $(el) s"
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data $D --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records --cpu-iterations 1"
timeout 130 $cli bench tpch $w --iterations 1 --explain --label loopback > $out/tpch-loopback.log 2>&1
echo "tpch loopback rc=$? at $(el) s"
timeout 60 $cli bench ssb $w --iterations 1 --explain --label loopback > $out/ssb-loopback.log 2>&1
echo "ssb loopback rc=$? at $(el) s"
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 60 $cli bench tpch $w --queries 9,18 --iterations 3 --link-gbps 10 --explain $set_ --label link10-$mode > $out/link10-$mode.log 2>&1
  echo "link10 $mode rc=$? at $(el) s"
done
grep -E "seed|runs:|^test result" $out/dist-tests.log
for f in tpch-loopback ssb-loopback link10-pipelined link10-blocking; do echo "== $f"; grep -E "^(total|geometric)" $out/$f.log; grep -A40 "^Stages of" $out/$f.log | grep -E "^q(9|18|4.1|21) "; done
grep -A8 "^GPU joins" $out/link10-*.log | grep -E " yes "
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log; tar czf $out/plans.tar.gz -C $out plans && rm -rf $out/plans
tar czf $OUT/o75.tar.gz -C $out .
