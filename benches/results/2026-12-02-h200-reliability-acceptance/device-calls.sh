#!/usr/bin/env bash
# The device calls of this record, as run on the H200 from the repository root (.calls/ holding
# the packed binaries; benches/results moved out so that a call carries under 64 MiB).
# Call 1: calls.sh 1; call 2: call2.sh (the machine stopped answering; no output); call 3: call3.sh.

# ===== calls.sh
# Device calls for issue 75's acceptance: `calls.sh 1|2` in the repository root on the H200.
#   1: the whole GPU suite (join differential tests beside it), the bench crate's tests, TPC-H and
#      SSB SF1 forced onto the GPU, and 4 fuzz processes (--time-limit 440).
#   2: 8 fuzz processes (--time-limit 480).
set -uo pipefail
call=${1:?which call: 1 or 2}
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
    timeout $(($2 + 70)) datafusion-gpu fuzz --queries 20000 --time-limit $2 --timeout 60 --seed $(($3 + j)) $4 --repro-dir $out/repros > $out/fuzz-seed$(($3 + j)).log 2>&1 &
  done
}
case $call in
  1) ( timeout 540 /tmp/b/$lib --test-threads 4 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$?" > $out/tests.rc ) &
     ( timeout 540 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$?" > $out/join.rc ) &
     ( timeout 200 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$?" > $out/bench.rc; sf1 ) &
     fuzz 4 440 501 "" ;;
  2) fuzz 8 480 601 "" ;;
esac
wait
echo "call $call: $(( $(date +%s) - t0 )) s"
free -g > $out/free.txt; dmesg 2>/dev/null | grep -i -E 'killed process|out of memory' > $out/oom.txt
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz

# ===== call2.sh
# Call 2: seeds 501-503 again (two were killed in a query, one aborted on a stack overflow) and
# seeds 505-509, each under `script` so that its progress bar shows which query it was in; for
# a process that ends without its summary, `--only` replays the query it was in and the one
# before. Beside them, query 1279 of seed 504 (a hang at 60 s) with a 300 s timeout, timed.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/repros $out/only
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/bin.tar.xz | tar xf - -C /tmp/b && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
command -v script >/dev/null || echo "no script(1) here" > $out/no-script.txt
one() { # seed
  local s=$1
  timeout 440 script -qfc "datafusion-gpu fuzz --queries 20000 --time-limit 380 --timeout 60 --seed $s --repro-dir $out/repros" $out/tty-$s.txt > $out/fuzz-seed$s.log 2>&1
  rc=$?; pkill -f -- "--seed $s --repro-dir" ; echo "seed $s rc=$rc at $(( $(date +%s) - t0 )) s" >> $out/rc.txt
  if ! grep -qE "seed $s: [0-9]+ queries" $out/fuzz-seed$s.log $out/tty-$s.txt 2>/dev/null; then
    p=$(tr '\r' '\n' < $out/tty-$s.txt | grep -oE '[0-9]+/20000 queries' | tail -1 | cut -d/ -f1)
    echo "seed $s ended without its summary; bar at ${p:-none}" >> $out/rc.txt
    if [ -n "$p" ]; then
      for n in $((p - 1)) $p $((p + 1)); do
        [ $n -ge 0 ] || continue
        ( timeout 110 datafusion-gpu fuzz --seed $s --only $n --timeout 60 > $out/only/seed$s-only$n.log 2>&1; echo "seed $s only $n rc=$?" >> $out/rc.txt ) &
      done
      wait
    fi
  fi
}
for s in 501 502 503 505 506 507 508 509; do one $s & done
( a=$(date +%s); timeout 420 datafusion-gpu fuzz --seed 504 --only 1279 --timeout 300 > $out/only/seed504-only1279.log 2>&1; echo "504 only 1279 rc=$? in $(( $(date +%s) - a )) s" >> $out/rc.txt ) &
wait
echo "call 2: $(( $(date +%s) - t0 )) s"
free -g > $out/free.txt
for f in $out/tty-*.txt; do tr '\r' '\n' < $f | tail -200 > $f.tail; rm $f; done
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz

# ===== call3.sh
# Call 3: the fuzzer with the large table's sets at batch sizes of at least 1000 and hangs
# judged against DataFusion's own time: 6 processes (seeds 701-706), --time-limit 300, each under
# `script` so that a process killed in a query shows which one.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/repros
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/cli.xz > /tmp/b/datafusion-gpu && chmod +x /tmp/b/datafusion-gpu && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
for s in 701 702 703 704 705 706; do
  ( timeout 375 script -qfc "datafusion-gpu fuzz --queries 20000 --time-limit 300 --timeout 60 --seed $s --repro-dir $out/repros" $out/tty-$s.txt > /dev/null 2>&1
    echo "seed $s rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
done
wait
echo "call 3: $(( $(date +%s) - t0 )) s"
free -g > $out/free.txt
for f in $out/tty-*.txt; do tr '\r' '\n' < $f | grep -v '^fuzz .*queries, ' > $f.log; tr '\r' '\n' < $f | grep -oE '[0-9]+/20000 queries' | tail -1 >> $f.log; rm $f; done
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz
cat $out/rc.txt; grep -hE "seed [0-9]+: [0-9]+ queries" $out/tty-*.log | cut -c1-400
