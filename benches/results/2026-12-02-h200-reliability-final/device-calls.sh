#!/usr/bin/env bash
# The device calls of this record, run on the H200 from the repository root with .calls/ holding the
# packed binaries (benches/results moved out so that a call carries under 64 MiB).
# Call A: callA.sh; call B: callB.sh 801 455.

# ===== .calls/pack.sh
#!/usr/bin/env bash
# Packs the CLI and the lib and bench test binaries into .calls/bin.tar.xz (one xz stream).
set -euo pipefail
cd /work/main
rm -rf /tmp/pack && mkdir -p /tmp/pack
python3 - <<'P' > /tmp/pack/list
import json
for l in open('/tmp/testbuild.json'):
    try: m=json.loads(l)
    except: continue
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['profile'].get('test'):
        n=m['target']['name']
        if n in ('datafusion_gpu','datafusion_gpu_bench') and m['target']['kind']==['lib']:
            print(m['executable'])
P
cat /tmp/pack/list
for f in $(cat /tmp/pack/list) target/release/datafusion-gpu; do cp "$f" /tmp/pack/; strip /tmp/pack/$(basename "$f"); done
ls -la /tmp/pack
tar cf - -C /tmp/pack $(cd /tmp/pack && ls | grep -v '^list$') | xz -T2 -9e --lzma2=dict=512MiB > .calls/bin.tar.xz
ls -la .calls/bin.tar.xz

# ===== .calls/callA.sh
#!/usr/bin/env bash
# Call A: the whole GPU suite (join differential tests beside it), the bench crate's tests,
# TPC-H and SSB SF1 forced onto the GPU, and the replays of the three failures of the last fuzz run.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out/only
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/bin.tar.xz | tar xf - -C /tmp/b && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
bench=$(ls /tmp/b | grep -E '^datafusion_gpu_bench-[0-9a-f]{16}$' | head -1)
echo "unpacked in $(( $(date +%s) - t0 )) s: $lib $bench"
( timeout 500 /tmp/b/$lib --test-threads 4 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 500 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 200 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt
  timeout 150 datafusion-gpu bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/tpch-sf1-always.log 2>&1; echo "tpch sf1 rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt
  timeout 100 datafusion-gpu bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/ssb-sf1-always.log 2>&1; echo "ssb sf1 rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( for r in "703 1759" "704 1017" "706 2483"; do set -- $r
    timeout 150 datafusion-gpu fuzz --seed $1 --only $2 --timeout 60 > $out/only/seed$1-only$2.log 2>&1; echo "seed $1 only $2 rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt
  done ) &
wait
echo "call A: $(( $(date +%s) - t0 )) s"
free -g > $out/free.txt
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz
cat $out/rc.txt; grep -h "test result" $out/tests*.log; grep -hE "seed [0-9]+: [0-9]+ queries" $out/only/*.log | cut -c1-300
grep -hiE "^(tpch|ssb)|queries .* (pass|ok|right)|wrong|mismatch" $out/*sf1*.log | tail -8

# ===== .calls/callB.sh
#!/usr/bin/env bash
# Call B: 6 fuzz processes (seeds $1..$1+5), --time-limit $2, each under `script` so that a
# process killed in a query shows which one.
set -uo pipefail
first=${1:?first seed}; limit=${2:-460}
out=/tmp/o; rm -rf $out; mkdir -p $out/repros
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/bin.tar.xz | tar xf - -C /tmp/b datafusion-gpu && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "unpacked in $(( $(date +%s) - t0 )) s"
for s in $(seq $first $((first + 5))); do
  ( timeout $((limit + 70)) script -qfc "datafusion-gpu fuzz --queries 20000 --time-limit $limit --timeout 60 --seed $s --repro-dir $out/repros" $out/tty-$s.txt > /dev/null 2>&1
    echo "seed $s rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
done
wait
echo "call B: $(( $(date +%s) - t0 )) s"
free -g > $out/free.txt
for f in $out/tty-*.txt; do tr '\r' '\n' < $f | grep -v '^fuzz .*queries, ' > $f.log; tr '\r' '\n' < $f | grep -oE '[0-9]+/20000 queries' | tail -1 >> $f.log; rm $f; done
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz
cat $out/rc.txt; grep -hE "seed [0-9]+: [0-9]+ queries" $out/tty-*.log | cut -c1-600
