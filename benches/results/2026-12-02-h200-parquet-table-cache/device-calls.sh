#!/usr/bin/env bash
# The device calls of this record, run on the H200 from the repository root with .calls/ holding the
# packed binaries (benches/results moved out so that a call carries under 64 MiB): call A (callA.sh,
# run twice: the second run is the one recorded), call B (callB.sh), call D (callD.sh 901 200).

# ===== .calls/pack.sh
#!/usr/bin/env bash
# Packs the lib and bench test binaries into .calls/tests.tar.xz and the CLI into .calls/cli.tar.xz.
set -euo pipefail
cd /work/main
rm -rf /tmp/pack && mkdir -p /tmp/pack/t /tmp/pack/c
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
for f in $(cat /tmp/pack/list); do cp "$f" /tmp/pack/t/; strip /tmp/pack/t/$(basename "$f"); done
cp target/release/datafusion-gpu /tmp/pack/c/ && strip /tmp/pack/c/datafusion-gpu
tar cf - -C /tmp/pack/t . | xz -T2 -9e --lzma2=dict=512MiB > .calls/tests.tar.xz &
tar cf - -C /tmp/pack/c . | xz -T2 -9e --lzma2=dict=512MiB > .calls/cli.tar.xz
wait
ls -la .calls/*.tar.xz

# ===== .calls/callA.sh
#!/usr/bin/env bash
# Call A: the GPU suite (join differential tests beside it) and the bench crate's tests.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/tests.tar.xz | tar xf - -C /tmp/b && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
bench=$(ls /tmp/b | grep -E '^datafusion_gpu_bench-[0-9a-f]{16}$' | head -1)
echo "unpacked in $(( $(date +%s) - t0 )) s: $lib $bench"
( timeout 500 /tmp/b/$lib --test-threads 4 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 500 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 200 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
wait
echo "call A: $(( $(date +%s) - t0 )) s"
free -g > $out/free.txt
cd $out && tar czf /tmp/logs.tar.gz . && cp /tmp/logs.tar.gz $OUT/logs.tar.gz
cat $out/rc.txt; grep -h "test result" $out/tests*.log; grep -hE "FAILED|panicked" $out/tests*.log | head -20

# ===== .calls/callB.sh
#!/usr/bin/env bash
# Call B: TPC-H and SSB SF1 checks (see below); TPC-H and SSB SF10 over Parquet files registered as a user registers them, with the
# defaults (the table cache on: the first query over a table loads its columns), 10 timed runs a
# query, every answer checked; the same with SET gpu.table_cache = false; DuckDB 2.0.1 with 16
# threads on the same files and query texts, on its own in-memory tables and on read_parquet views.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .calls/cli.tar.xz | tar xf - -C /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 150 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --source parquet --no-save > $out/gen-ssb.log 2>&1 &
timeout 200 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --source parquet --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"; du -sh /tmp/dfg-data/* | tee $out/data-sizes.txt
# SF1: DataFusion's answers over Parquet with the defaults (2 timed runs), forced onto the GPU over
# Parquet, and forced onto the GPU in memory.
for s in tpch ssb; do
  timeout 100 $cli bench $s --sf 1 --iterations 2 --cpu-iterations 1 --data /tmp/dfg-data --source parquet --no-save > $out/$s-sf1-parquet-defaults.log 2>&1; echo "$s sf1 parquet defaults rc=$? at $(el) s: $(grep -h 'results:' $out/$s-sf1-parquet-defaults.log)"
  timeout 100 $cli bench $s --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --data /tmp/dfg-data --source parquet --no-save > $out/$s-sf1-parquet-always.log 2>&1; echo "$s sf1 parquet always rc=$? at $(el) s: $(grep -h 'results:' $out/$s-sf1-parquet-always.log)"
  timeout 100 $cli bench $s --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > $out/$s-sf1-memory-always.log 2>&1; echo "$s sf1 memory always rc=$? at $(el) s: $(grep -h 'results:' $out/$s-sf1-memory-always.log)"
done
run() { # suite label extra-args...
  local suite=$1 label=$2; shift 2
  timeout 200 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 3 --data /tmp/dfg-data --source parquet "$@" --out $out/records --label $label > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log)"
  r=$(ls $out/records/*-$suite-sf10-$label.json 2>/dev/null | head -1)
  for d in memory views; do
    [ -n "$r" ] && [ -f $out/duckdb-$suite-$d.json ] && echo "  beside DuckDB ($d): $(python3 scripts/beside-duckdb.py $r $out/duckdb-$suite-$d.json | tail -2 | tr '\n' ' ')"
  done
}
for suite in ssb tpch; do
  timeout 120 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite-memory.json > $out/duckdb-$suite-memory.log 2>&1
  echo "duckdb $suite memory rc=$? at $(el) s"
  timeout 150 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite-views.json views > $out/duckdb-$suite-views.log 2>&1
  echo "duckdb $suite views rc=$? at $(el) s"
  run $suite parquet-defaults
done
[ $(el) -lt 420 ] && run ssb parquet-no-table-cache --gpu-set gpu.table_cache=false
[ $(el) -lt 470 ] && run tpch parquet-no-table-cache --gpu-set gpu.table_cache=false
gzip $out/*.log
cd $out && tar czf $OUT/callB.tar.gz .

# ===== .calls/callD.sh
#!/usr/bin/env bash
# Call D: the two GPU tests mended after call A (the table cache's small-limit case, the memory-limit
# peak), the table-cache and Parquet tests again, then 6 fuzz processes (seeds $1..$1+5) for $2 s.
set -uo pipefail
first=${1:?first seed}; limit=${2:-200}
out=/tmp/o; rm -rf $out; mkdir -p $out/repros
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/lib.tar.xz | tar xf - -C /tmp/b && xz -dc .calls/cli.tar.xz | tar xf - -C /tmp/b && export PATH=/tmp/b:$PATH
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
timeout 120 /tmp/b/$lib --test-threads 1 cached_scan_tests joins_over_the_memory_limit > $out/tests.log 2>&1; echo "tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt
for s in $(seq $first $((first + 5))); do
  ( timeout $((limit + 60)) script -qfc "datafusion-gpu fuzz --queries 20000 --time-limit $limit --timeout 60 --seed $s --repro-dir $out/repros" $out/tty-$s.txt > /dev/null 2>&1
    echo "seed $s rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
done
wait
echo "call D: $(( $(date +%s) - t0 )) s"
for f in $out/tty-*.txt; do tr '\r' '\n' < $f | grep -v '^fuzz .*queries, ' > $f.log; rm $f; done
cd $out && tar czf $OUT/logs.tar.gz .
cat $out/rc.txt; grep -h "test result" $out/tests.log; grep -hE "FAILED|panicked" $out/tests.log | head
grep -hE "seed [0-9]+: [0-9]+ queries" $out/tty-*.log | cut -c1-700
