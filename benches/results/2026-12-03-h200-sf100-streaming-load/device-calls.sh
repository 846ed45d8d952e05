#!/usr/bin/env bash
# The device calls of this record, run on the H200 from the repository root with .calls/ holding the
# packed binaries (tests.tar.xz: the lib and bench test binaries, stripped; cli.tar.xz: the CLI) and .whl/
# the DuckDB 2.0.1 wheel; benches/results moved out so that a call carries under 64 MiB.

# ===== .calls/callA.sh
#!/usr/bin/env bash
# Call A: the GPU library suite (join differential tests beside it) and the bench crate's tests.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/tests.tar.xz | tar xf - -C /tmp/b
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
bench=$(ls /tmp/b | grep -E '^datafusion_gpu_bench-[0-9a-f]{16}$' | head -1)
echo "unpacked in $(( $(date +%s) - t0 )) s: $lib $bench"
( timeout 540 /tmp/b/$lib --test-threads 6 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 540 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 300 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
wait
echo "call A: $(( $(date +%s) - t0 )) s"
cd $out && tar czf $OUT/logs.tar.gz .
cat $out/rc.txt; grep -h "test result" $out/tests*.log; grep -hE "FAILED|panicked|^failures:|^    [a-z_:]+$" $out/tests*.log | head -30

# ===== .calls/callB.sh
#!/usr/bin/env bash
# Call B: TPC-H and SSB SF1 checks over Parquet (defaults; every eligible operator forced onto the
# GPU), then TPC-H and SSB SF10 over Parquet files registered as a user registers them, with the
# defaults (table cache on, packed columns on), 10 timed runs a query, every answer checked;
# DuckDB 2.0.1 with 16 threads on the same files and query texts, on its own in-memory tables and
# on read_parquet views; then the same with SET gpu.table_cache.compress = false.
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
T=""; [ -x /usr/bin/time ] && T="/usr/bin/time -v"
( $T $cli gen ssb --sf 10 --out /tmp/dfg-data > $out/gen-ssb.log 2>&1 ) &
$T $cli gen tpch --sf 10 --out /tmp/dfg-data > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"; du -sh /tmp/dfg-data/* | tee $out/data-sizes.txt
grep -h "Elapsed\|Maximum resident" $out/gen-*.log
for s in tpch ssb; do
  timeout 100 $cli bench $s --sf 1 --iterations 2 --cpu-iterations 1 --data /tmp/dfg-data --source parquet --no-save > $out/$s-sf1-parquet-defaults.log 2>&1; echo "$s sf1 parquet defaults rc=$? at $(el) s: $(grep -h 'results:' $out/$s-sf1-parquet-defaults.log)"
  timeout 100 $cli bench $s --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --data /tmp/dfg-data --source parquet --no-save > $out/$s-sf1-parquet-always.log 2>&1; echo "$s sf1 parquet always rc=$? at $(el) s: $(grep -h 'results:' $out/$s-sf1-parquet-always.log)"
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
[ $(el) -lt 430 ] && run ssb parquet-uncompressed --gpu-set gpu.table_cache.compress=false
[ $(el) -lt 470 ] && run tpch parquet-uncompressed --gpu-set gpu.table_cache.compress=false
gzip $out/*.log
cd $out && tar czf $OUT/callB.tar.gz .

# ===== .calls/callC.sh
#!/usr/bin/env bash
# Call C: TPC-H SF100 on one H200. The tables are generated straight into Parquet (streaming
# writer), then `bench tpch --sf 100 --source parquet` with the defaults (table cache and packed
# columns on): each query run once by DataFusion's CPU engine (the reference its answer is checked
# against) and with the GPU rule (the first run loads the columns earlier queries did not), then
# 2 timed GPU runs. The run is cut at its time limit; a line a query says how far it got.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .calls/cli.tar.xz | tar xf - -C /tmp/b
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
df -h /tmp | tail -1
T=""; [ -x /usr/bin/time ] && T="/usr/bin/time -v"
$T $cli gen tpch --sf 100 --out /tmp/dfg-data > $out/gen-tpch.log 2>&1
echo "gen rc=$? at $(el) s"; du -sh /tmp/dfg-data/tpch-sf100 | tee $out/data-size.txt; ls -la /tmp/dfg-data/tpch-sf100 >> $out/data-size.txt
grep -h "Elapsed\|Maximum resident" $out/gen-tpch.log
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -l 2 > $out/gpu-memory.csv &
smi=$!
left=$(( 585 - $(el) ))
$T timeout $left $cli bench tpch --sf 100 --iterations 2 --cpu-iterations 0 --data /tmp/dfg-data --source parquet --out $out/records --label parquet-defaults > $out/bench.log 2>&1
echo "bench rc=$? at $(el) s"
kill $smi
grep -E "^q[0-9]+:|results:|host memory|Elapsed|Maximum resident" $out/bench.log | cut -c1-220
sort -t, -k2 -n $out/gpu-memory.csv | tail -1
gzip $out/*.log
cd $out && tar czf $OUT/callC.tar.gz .

# ===== .calls/callD.sh
#!/usr/bin/env bash
# Call D: TPC-H SF100 through the CLI alone (no CPU engine in the process): a fresh process
# registers the 8 Parquet files as external tables and runs the 22 queries 3 times in a row with
# the defaults (pass 1: the first query of a fresh process over each table loads its columns,
# kernels compiled as they are needed); its peak RSS and each statement's time. Then q18 three
# times in a fresh process with the timeline on.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .calls/cli.tar.xz | tar xf - -C /tmp/b
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
T=""; [ -x /usr/bin/time ] && T="/usr/bin/time -v"
$T $cli gen tpch --sf 100 --out /tmp/dfg-data > $out/gen-tpch.log 2>&1
echo "gen rc=$? at $(el) s"; grep -h "Elapsed\|Maximum resident" $out/gen-tpch.log
d=/tmp/dfg-data/tpch-sf100; q=crates/datafusion-gpu-bench/tpch/queries/tpch
tables() { for t in nation region supplier customer part partsupp orders lineitem; do echo "CREATE EXTERNAL TABLE $t STORED AS PARQUET LOCATION '$d/$t.parquet';"; done; }
{ tables; for pass in 1 2 3; do for i in $(seq 1 22); do grep -v '^--' $q/q$i.sql; echo; done; done; } > $out/all.sql
{ tables; for pass in 1 2 3; do grep -v '^--' $q/q18.sql; echo; done; } > $out/q18.sql
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -l 1 > $out/gpu-memory.csv &
smi=$!
$T timeout 300 $cli --format csv -f $out/all.sql > $out/all.out 2> $out/all.err
echo "all rc=$? at $(el) s"
grep -h "Elapsed\|Maximum resident" $out/all.err
grep -o "Elapsed [0-9.]* seconds" $out/all.out | awk 'NR>8{n=NR-9; printf "pass %d q%d %s\n", int(n/22)+1, n%22+1, $2}' > $out/times.txt
awk '{s[$2]+=$4; print} END{for(p in s) print "pass total", p, s[p]}' $out/times.txt | tail -3
awk '{print $1,$2,$3,$4}' $out/times.txt | paste - - - - - - - - - - - | head -8
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli --format csv -f $out/q18.sql > $out/q18.out 2> $out/q18.err
echo "q18 rc=$? at $(el) s: $(grep -o 'Elapsed [0-9.]* seconds' $out/q18.out | tr '\n' ' ')"
kill $smi
sort -t, -k2 -n $out/gpu-memory.csv | tail -1
gzip $out/*.out $out/*.err
cd $out && tar czf $OUT/callD.tar.gz .
