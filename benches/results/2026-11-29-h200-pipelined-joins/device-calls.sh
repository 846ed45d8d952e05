# ===== call1/t71.sh
#!/usr/bin/env bash
# Session 22 call 1: the GPU suite and the distributed differential test (2 and 4 workers) after
# the pipelined join inputs, the link and the staged plans without fallback notes.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o71; rm -rf $out; mkdir -p $out/plans /tmp/b
for f in lib-tests dist-tests; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 380 /tmp/b/lib-tests --test-threads 4 > $out/lib-tests.log 2>&1
echo "lib rc=$? at $(el) s"
DFG_DISTRIBUTED_WORKERS=2,4 DFG_DISTRIBUTED_PLANS=$out/plans timeout 150 /tmp/b/dist-tests --nocapture > $out/dist-tests.log 2>&1
echo "dist rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/lib-tests.log | head -20
grep -E "seed|^test result|FAILED|panicked|staged|GPU op" $out/dist-tests.log | head -20
grep -E "pipelined_and_blocking" $out/lib-tests.log
gzip $out/*.log; tar czf $out/plans.tar.gz -C $out plans && rm -rf $out/plans
cp -r $out/. $OUT/
# ===== call2/t72.sh
#!/usr/bin/env bash
# Session 22 call 2: TPC-H q9 and q18 at SF10 through 2 local workers whose shuffles cross a
# 10 Gb/s link (--link-gbps 10), GPU joins pipelined against blocking; the same over the
# loopback; then every TPC-H and SSB query through 2 workers for shuffle bytes and join times.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o72; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records"
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 110 $cli bench tpch $w --queries 9,18 --iterations 3 --cpu-iterations 1 --link-gbps 10 --explain $set_ --label link10-$mode > $out/link10-$mode.log 2>&1
  echo "link10 $mode rc=$? at $(el) s"
done
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 70 $cli bench tpch $w --queries 9,18 --iterations 3 --cpu-iterations 1 $set_ --label loopback-$mode > $out/loopback-$mode.log 2>&1
  echo "loopback $mode rc=$? at $(el) s"
done
timeout 130 $cli bench tpch $w --iterations 1 --cpu-iterations 1 --explain --label all-2-workers > $out/tpch-all.log 2>&1
echo "tpch all rc=$? at $(el) s"
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data $D --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
timeout 90 $cli bench ssb $w --iterations 1 --cpu-iterations 1 --explain --label all-2-workers > $out/ssb-all.log 2>&1
echo "ssb all rc=$? at $(el) s"
for f in link10-pipelined link10-blocking loopback-pipelined loopback-blocking; do echo "== $f"; grep -E "^q[0-9.]+ +[0-9]" $out/$f.log | cut -c1-70; grep -A8 "^GPU joins" $out/$f.log | grep -E "^q" ; done
grep -hE "^q[0-9.]+ +[0-9]" $out/tpch-all.log $out/ssb-all.log | cut -c1-70
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log
cp -r $out/. $OUT/
# ===== call3/t73.sh
#!/usr/bin/env bash
# Session 22 call 3: TPC-H q9 and q18 at SF10 through 2 local workers whose shuffles cross a
# 10 Gb/s link (--link-gbps 10; the link's timer fixed after call 2), GPU joins pipelined against
# blocking; then the same at 1 Gb/s.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o73; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records --queries 9,18 --cpu-iterations 1"
for gbps in 10 1; do
  it=3; [ $gbps = 1 ] && it=2
  for mode in pipelined blocking; do
    set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
    timeout 150 $cli bench tpch $w --iterations $it --link-gbps $gbps --explain $set_ --label link$gbps-$mode > $out/link$gbps-$mode.log 2>&1
    echo "link$gbps $mode rc=$? at $(el) s"
  done
done
for f in link10-pipelined link10-blocking link1-pipelined link1-blocking; do echo "== $f"; grep -E "^q[0-9.]+ +[0-9]" $out/$f.log | cut -c1-70; grep -A8 "^GPU joins" $out/$f.log | grep -E "^q" ; done
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log
tar czf $OUT/o73.tar.gz -C $out .
# ===== call4/t74.sh
#!/usr/bin/env bash
# Session 22 call 4: every TPC-H and SSB query at SF10 through 2 local workers over the loopback
# (shuffle bytes, each GPU join's input and end times, the staged plans with per-task metrics),
# then every TPC-H query over the 10 Gb/s link, GPU joins pipelined and blocking.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o74; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; D=/tmp/dfg-data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data $D --no-save > $out/gen-tpch.log 2>&1
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data $D --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
w="--sf 10 --data $D --local-workers 2 --out $out/records --iterations 1 --cpu-iterations 1"
timeout 130 $cli bench tpch $w --explain --label loopback > $out/tpch-loopback.log 2>&1
echo "tpch loopback rc=$? at $(el) s"
timeout 60 $cli bench ssb $w --explain --label loopback > $out/ssb-loopback.log 2>&1
echo "ssb loopback rc=$? at $(el) s"
for mode in pipelined blocking; do
  set_=""; [ $mode = blocking ] && set_="--gpu-set gpu.join.pipelined_inputs=false"
  timeout 140 $cli bench tpch $w --link-gbps 10 $set_ --label link10-$mode > $out/tpch-link10-$mode.log 2>&1
  echo "tpch link10 $mode rc=$? at $(el) s"
done
for f in tpch-loopback ssb-loopback tpch-link10-pipelined tpch-link10-blocking; do echo "== $f"; grep -E "^(total|geometric)" $out/$f.log; done
grep -h "staged plan's metrics" $out/*.log | sort | uniq -c | head
gzip $out/*.log
tar czf $OUT/o74.tar.gz -C $out .
# ===== call5/t75.sh
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
# ===== call6/t76.sh
#!/usr/bin/env bash
# Session 22 call 6: the GPU join, rule and recovery tests on the final build (1bfa415: the
# kept-build helper shared by both build paths).
set -uo pipefail
mkdir -p /tmp/b; xz -dc .device6/lib-tests.xz > /tmp/b/lib-tests; chmod +x /tmp/b/lib-tests
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for f in join:: exec::join rule:: exec::recovery; do timeout 100 /tmp/b/lib-tests --test-threads 4 $f 2>&1 | grep -E "^test result|FAILED|panicked"; done
