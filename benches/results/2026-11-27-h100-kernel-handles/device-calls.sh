# ===== ab.sh
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
# ===== t1.sh
#!/usr/bin/env bash
# Call 1: the GPU suite (library, join differential tests, bench crate, sqllogictests), SF1 checks
# with every eligible operator on the GPU, the demo.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/tests.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-02e1eebef466457e; bench=/tmp/b/datafusion_gpu_bench-d16751cd728006b9
slt=/tmp/b/sqllogictests-02d8a4161dc6bc47; cli=/tmp/b/datafusion-gpu
echo "unpacked at $(el) s"
timeout 200 $lib --test-threads 4 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" > $out/lib.rc
cat $out/lib.rc
( timeout $(( 570 - $(el) )) $lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(el) s" > $out/join.rc ) &
( timeout 200 $bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(el) s" > $out/bench.rc
  timeout 100 $slt > $out/tests-slt.log 2>&1; echo "sqllogictests rc=$? at $(el) s" >> $out/bench.rc
  timeout 150 $cli bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/tpch-sf1-always.log 2>&1; echo "tpch sf1 rc=$? at $(el) s" > $out/sf1.rc
  timeout 100 $cli bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/ssb-sf1-always.log 2>&1; echo "ssb sf1 rc=$? at $(el) s" >> $out/sf1.rc
  timeout 60 $cli demo > $out/demo.log 2>&1; echo "demo rc=$? at $(el) s" >> $out/sf1.rc ) &
wait
cd $out && tar czf $OUT/t1-logs.tar.gz . ; cd - >/dev/null
echo "== tests"; cat $out/lib.rc $out/bench.rc $out/join.rc
grep -hE '^test result|FAILED|panicked|^test .* FAILED' $out/tests-*.log | head -30
grep -h "out-of-core joins:\|one after another" $out/tests-join.log | tail -8
echo "== sf1"; cat $out/sf1.rc; grep -h 'results:' $out/*sf1*.log; tail -3 $out/demo.log
# ===== t2.sh
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
