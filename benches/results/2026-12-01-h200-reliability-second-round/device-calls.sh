#!/usr/bin/env bash
# The three device calls of this record, as run: `device-calls.sh 1|2|3` in the repository root
# on the H200, with .calls/bin.tar.xz holding the CLI, the library's test binary and the bench
# crate's test binary (one xz stream with a 512 MiB dictionary: 48 MiB for the three, against 91
# MiB as three files) and benches/results moved out of the working tree so that the call carries
# under 64 MiB.
#   1: the whole GPU suite, the bench crate's tests, TPC-H and SSB SF1 forced onto the GPU, and
#      5 fuzz processes (--time-limit 380), all at once (as run: --queries 5000, each process
#      killed 90 s past its time limit).
#   2: the changed GPU tests, then 13 fuzz processes (--time-limit 430, --timeout 60).
#   3: the whole GPU suite (join differential tests beside the rest), the bench crate's tests,
#      TPC-H and SSB SF1 forced onto the GPU.
set -uo pipefail
call=${1:?which call: 1, 2 or 3}
out=/tmp/o; rm -rf $out; mkdir -p $out/repros
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/bin.tar.xz | tar xf - -C /tmp/b && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
bench=$(ls /tmp/b | grep -E '^datafusion_gpu_bench-[0-9a-f]{16}$' | head -1)
sf1() {
  timeout 200 datafusion-gpu bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/tpch-sf1-always.log 2>&1; echo "tpch rc=$?" > $out/sf1.rc
  timeout 120 datafusion-gpu bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/ssb-sf1-always.log 2>&1; echo "ssb rc=$?" >> $out/sf1.rc
}
fuzz() { # processes, seconds, first seed, extra options
  for j in $(seq 0 $(($1 - 1))); do
    timeout $(($2 + 100)) datafusion-gpu fuzz --queries 20000 --time-limit $2 --seed $(($3 + j)) $4 --repro-dir $out/repros > $out/fuzz-seed$(($3 + j)).log 2>&1 &
  done
}
case $call in
  1) ( timeout 470 /tmp/b/$lib --test-threads 4 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$?" > $out/tests.rc ) &
     ( timeout 300 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$?" > $out/join.rc ) &
     ( timeout 300 /tmp/b/$bench --test-threads 2 > $out/tests-$bench.log 2>&1; echo "$bench rc=$?" > $out/other.rc ) &
     sf1 & fuzz 5 380 301 "" ;;
  2) ( timeout 300 /tmp/b/$lib --test-threads 2 exec::expression_tests exec::cached_scan_tests exec::cached_table \
         aggregate::tests::gpu_expressions_raise aggregate::tests::gpu_aggregate_fuses distributed:: columns::cache \
         exec::query error:: > $out/tests-changed.log 2>&1; echo "changed tests rc=$?" > $out/tests.rc ) &
     fuzz 13 430 401 "--timeout 60" ;;
  3) ( timeout 420 /tmp/b/$lib --test-threads 4 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$?" > $out/tests.rc ) &
     ( timeout 420 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$?" > $out/join.rc ) &
     ( timeout 300 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$?" > $out/bench.rc; sf1 ) & ;;
esac
wait
echo "call $call: $(( $(date +%s) - t0 )) s"
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz
