# ===== call1/t91.sh
#!/usr/bin/env bash
# Session 21 call 1: the GPU suite on the distributed build, then the distributed differential
# test (every TPC-H and SSB query at SF 0.1 through 2 and 4 in-process workers sharing the GPU,
# against single-process DataFusion), with each staged plan written out.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o91; rm -rf $out; mkdir -p $out/plans /tmp/b
for f in dfg-tests dist-tests; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)" > $out/lscpu.txt
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
DFG_DISTRIBUTED_WORKERS=2,4 DFG_DISTRIBUTED_PLANS=$out/plans timeout 240 /tmp/b/dist-tests --nocapture > $out/dist.log 2>&1; echo "distributed test rc=$? at $(el) s"
grep -E "seed|runs:|^test result|panicked|answers otherwise" $out/dist.log | head -10
grep -c "Gpu" $out/plans/tpch-q3-2w.txt; head -60 $out/plans/tpch-q3-2w.txt | cut -c1-200
for f in $out/plans/*-2w.txt; do printf "%s %s\n" $(basename $f .txt) $(grep -cE "Gpu(HashJoin|Aggregate|FilterProject)Exec" $f); done | paste -sd' ' | fold -w 200
gzip $out/*.log
cd $out && tar czf $OUT/t91.tar.gz .
# ===== call2/t92.sh
#!/usr/bin/env bash
# Session 21 call 2: the codec test on the device (GPU execs come back as GPU execs), then TPC-H
# SF10 single-process (DataFusion against the GPU rule) and through 2 local workers sharing the
# GPU (DataFusion Distributed with the rule off against it on), 3 timed runs a query after one
# checked run, from the same Parquet.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o92; rm -rf $out; mkdir -p $out/records /tmp/b
for f in plan-tests datafusion-gpu; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 60 /tmp/b/plan-tests --nocapture > $out/plan-tests.log 2>&1; echo "codec tests rc=$? at $(el) s"
grep -E "carried|^test result|panicked" $out/plan-tests.log | head -5
wait; echo "data at $(el) s"
timeout 170 $cli bench tpch --sf 10 --iterations 3 --data /tmp/dfg-data --out $out/records --label single > $out/tpch-single.log 2>&1
echo "single rc=$? at $(el) s: $(grep -h 'results:' $out/tpch-single.log)"
timeout 330 $cli bench tpch --sf 10 --iterations 3 --data /tmp/dfg-data --local-workers 2 --out $out/records --label 2-workers > $out/tpch-2w.log 2>&1
echo "2 workers rc=$? at $(el) s: $(grep -h 'results:' $out/tpch-2w.log)"
for f in single 2w; do echo "== $f"; grep -E "^q[0-9]+ |geomean|Both" $out/tpch-$f.log | cut -c1-80; done
gzip $out/*.log
cd $out && tar czf $OUT/t92.tar.gz .
# ===== call3/t93.sh
#!/usr/bin/env bash
# Session 21 call 3: SSB SF10 single-process and through 2 local workers sharing the GPU (3 timed
# GPU runs, 1 CPU run a query after one checked run), then TPC-H SF10 through 2 workers once more
# with the staged plans and every task's metrics printed (--explain) and the bytes its network
# boundaries received.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o93; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
timeout 150 $cli bench ssb --sf 10 --iterations 3 --cpu-iterations 1 --data /tmp/dfg-data --out $out/records --label single > $out/ssb-single.log 2>&1
echo "ssb single rc=$? at $(el) s: $(grep -h 'results:' $out/ssb-single.log)"
wait
timeout 240 $cli bench ssb --sf 10 --iterations 3 --cpu-iterations 1 --data /tmp/dfg-data --local-workers 2 --out $out/records --label 2-workers > $out/ssb-2w.log 2>&1
echo "ssb 2 workers rc=$? at $(el) s: $(grep -h 'results:' $out/ssb-2w.log)"
left=$(( 560 - $(el) ))
[ $left -gt 60 ] && timeout $left $cli bench tpch --sf 10 --iterations 1 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label 2-workers-explain > $out/tpch-2w-explain.log 2>&1
echo "tpch explain rc=$? at $(el) s: $(grep -h 'results:' $out/tpch-2w-explain.log)"
for f in ssb-single ssb-2w; do echo "== $f"; grep -E "^q[0-9.]+ |geomean|total" $out/$f.log | cut -c1-70; done
echo "== tpch 2w explain"; grep -E "^q[0-9]+ " $out/tpch-2w-explain.log | cut -c1-60
gzip $out/*.log
cd $out && tar czf $OUT/t93.tar.gz .
# ===== call4/t94.sh
#!/usr/bin/env bash
# Session 21 call 4: the runner's bytes over the wire (bytes_transferred of every network
# boundary) and staged per-task metrics, TPC-H SF10 q1, q3, q9, q18 and SSB q4.1 through 2 local
# workers, one timed run each after the checked one.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o94; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
timeout 200 $cli bench tpch --sf 10 --iterations 1 --queries 1,3,9,18 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label net > $out/tpch-net.log 2>&1
echo "tpch rc=$? at $(el) s"
timeout 120 $cli bench ssb --sf 10 --iterations 1 --queries 4.1 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label net > $out/ssb-net.log 2>&1
echo "ssb rc=$? at $(el) s"
grep -hE "^q[0-9.]+ +[0-9]" $out/tpch-net.log $out/ssb-net.log | cut -c1-75
grep -h "net MiB:" $out/tpch-net.log | head -1
gzip $out/*.log
cd $out && tar czf $OUT/t94.tar.gz .
# ===== call5/t95.sh
#!/usr/bin/env bash
# Session 21 call 5: after the fix of its custom-metric sum, the runner's bytes over the wire (bytes_transferred of every network
# boundary) and staged per-task metrics, TPC-H SF10 q1, q3, q9, q18 and SSB q4.1 through 2 local
# workers, one timed run each after the checked one.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o95; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/datafusion-gpu.xz > /tmp/b/datafusion-gpu; chmod +x /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
timeout 200 $cli bench tpch --sf 10 --iterations 1 --queries 1,3,9,18 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label net > $out/tpch-net.log 2>&1
echo "tpch rc=$? at $(el) s"
timeout 120 $cli bench ssb --sf 10 --iterations 1 --queries 4.1 --data /tmp/dfg-data --local-workers 2 --explain --out $out/records --label net > $out/ssb-net.log 2>&1
echo "ssb rc=$? at $(el) s"
grep -hE "^q[0-9.]+ +[0-9]" $out/tpch-net.log $out/ssb-net.log | cut -c1-75
grep -h "net MiB:" $out/tpch-net.log | head -1
gzip $out/*.log
cd $out && tar czf $OUT/t95.tar.gz .
# ===== call6/t96.sh
#!/usr/bin/env bash
# Session 21 call 6: after the review mends (f737584, 2ad6d63), the GPU suite and the distributed
# test (every TPC-H and SSB query at SF 0.1 through 2 and 4 in-process workers sharing the GPU,
# against single-process DataFusion), with each staged plan written out.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o96; rm -rf $out; mkdir -p $out/plans /tmp/b
for f in dfg-tests dist-tests; do xz -dc .device6/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)" > $out/lscpu.txt
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
DFG_DISTRIBUTED_WORKERS=2,4 DFG_DISTRIBUTED_PLANS=$out/plans timeout 240 /tmp/b/dist-tests --nocapture > $out/dist.log 2>&1; echo "distributed test rc=$? at $(el) s"
grep -E "seed|runs:|^test result|panicked|answers otherwise" $out/dist.log | head -10
grep -c "Gpu" $out/plans/tpch-q3-2w.txt; head -60 $out/plans/tpch-q3-2w.txt | cut -c1-200
for f in $out/plans/*-2w.txt; do printf "%s %s\n" $(basename $f .txt) $(grep -cE "Gpu(HashJoin|Aggregate|FilterProject)Exec" $f); done | paste -sd' ' | fold -w 200
gzip $out/*.log
cd $out && tar czf $OUT/t96.tar.gz .
