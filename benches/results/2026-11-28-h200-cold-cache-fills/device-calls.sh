# ===== call1/t65.sh
#!/usr/bin/env bash
# Session 16 call 1: the cold path of issue 46 as it stands. SSB and TPC-H SF10 over pageable
# in-memory tables with gpu.table_cache on, the cache emptied before each timed GPU run (--cold),
# 3 timed runs a query, every answer checked; DuckDB 2.0.1 in the same call (10 runs); the
# transfer benchmark (host copy and staged upload rates); timelines of cold SSB q1.1 and TPC-H q6.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o65; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|L3" | tee $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
timeout 60 $cli bench transfer > $out/transfer.log 2>&1; echo "transfer rc=$? at $(el) s"; tail -25 $out/transfer.log
for suite in ssb tpch; do
  left=$(( 400 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --cold --out $out/records --label cold > $out/$suite-cold.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold.log) $(grep -h 'results:' $out/$suite-cold.log)"
  left=$(( 470 - $(el) ))
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cold.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -27
done
left=$(( 560 - $(el) ))
[ $left -gt 20 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 1 --cpu-iterations 0 --queries 1.1,3.4 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline ssb at $(el) s"
left=$(( 590 - $(el) ))
[ $left -gt 20 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench tpch --sf 10 --iterations 1 --cpu-iterations 0 --queries 6 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t65.tar.gz .
# ===== call2/t66.sh
#!/usr/bin/env bash
# Session 16 call 2: the cold path after parallel view assembly, with the upload's staging times
# in the timeline. SSB and TPC-H SF10 over GpuCachedTable (--residency cached), cache emptied
# before each timed GPU run (--cold), 3 timed runs a query; timelines of cold SSB q1.1, q4.1 and
# TPC-H q1, q6, q19.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o66; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  timeout 150 $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold > $out/$suite-cold.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold.log) $(grep -h 'results:' $out/$suite-cold.log)"
  grep -E "^q[0-9.]+ +[-0-9]" $out/$suite-cold.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 60 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,4.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline ssb at $(el) s"
grep -E "upload: |timed run|uploaded" $out/ssb-cold-timeline.log | tail -12 | cut -c45-300
RUST_LOG=datafusion_gpu::timeline=debug timeout 90 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 1,6,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timeline tpch at $(el) s"
grep -E "upload: |timed run|uploaded" $out/tpch-cold-timeline.log | tail -20 | cut -c45-300
gzip $out/*.log
cd $out && tar czf $OUT/t66.tar.gz .
# ===== call3/t67.sh
#!/usr/bin/env bash
# Session 16 call 3: the GPU suite on the build with parallel packing of cache fills, SF10 data
# generated beside it; then SSB and TPC-H SF10 over GpuCachedTable, cache emptied before each
# timed GPU run (--cold), 3 timed runs a query; timelines of cold SSB q1.1, q1.3 and TPC-H q1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o67; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  timeout 100 $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold > $out/$suite-cold.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold.log) $(grep -h 'results:' $out/$suite-cold.log)"
  grep -E "^q[0-9.]+ +[-0-9]" $out/$suite-cold.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 50 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,1.3 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline ssb at $(el) s"
grep -E "upload|timed run|cached scan|rule: starts" $out/ssb-cold-timeline.log | grep -v "pieces, [0-9.]*[KM]*i*B staged in 1 slots" | tail -14 | cut -c45-230
RUST_LOG=datafusion_gpu::timeline=debug timeout 50 $cli bench tpch --sf 10 --iterations 1 --cpu-iterations 0 --queries 1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timeline tpch at $(el) s"
grep -E "upload|timed run|cached scan|rule: starts" $out/tpch-cold-timeline.log | grep -v "pieces, [0-9.]*[KM]*i*B staged in 1 slots" | tail -8 | cut -c45-230
gzip $out/*.log
cd $out && tar czf $OUT/t67.tar.gz .
# ===== call4/t68.sh
#!/usr/bin/env bash
# Session 16 call 4: the GPU suite on the build with frame-of-reference narrowing, shared-schema
# projections and whole-batch groups (SF10 data generated beside it); then SSB and TPC-H SF10
# over GpuCachedTable with the cache emptied before each timed GPU run (--cold), 3 timed runs a
# query; SSB again with gpu.transfer.narrow_offsets=false (A/B); timeline of cold SSB q1.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o68; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
wait; echo "data at $(el) s"
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  timeout 100 $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label $label "$@" > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-$label.log) $(grep -h 'results:' $out/$suite-$label.log)"
  grep -E "^q[0-9.]+ +[-0-9]" $out/$suite-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
run ssb cold
run tpch cold
run ssb cold-no-offsets --gpu-set gpu.transfer.narrow_offsets=false
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline ssb at $(el) s"
grep -E "upload|timed run|cached scan|rule: starts" $out/ssb-cold-timeline.log | grep -v "pieces, [0-9.]*[KM]*i*B staged in 1 slots" | tail -11 | cut -c45-230
gzip $out/*.log
cd $out && tar czf $OUT/t68.tar.gz .
# ===== call5/t69.sh
#!/usr/bin/env bash
# Session 16 call 5: issue 46's cold case on the final build (defaults). SSB and TPC-H SF10 over
# pageable in-memory tables registered as GpuCachedTable, the device's table cache emptied before
# each of 10 timed GPU runs a query (--cold: every timed run uploads every column it reads), every
# answer checked; DuckDB 2.0.1 in the same call (16 threads, same Parquet and query texts, its own
# in-memory tables, 10 timed runs after a warm-up); timelines of cold SSB q1.1 and TPC-H q6.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o69; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  timeout 120 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold-10 > $out/$suite-cold-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cold-10.log) $(grep -h 'results:' $out/$suite-cold-10.log)"
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cold-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -26
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 6 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timelines at $(el) s"
grep -E "upload: [0-9]{4,}|timed run ends" $out/ssb-cold-timeline.log $out/tpch-cold-timeline.log | tail -4 | cut -c60-230
gzip $out/*.log
cd $out && tar czf $OUT/t69.tar.gz .
# ===== call6/t70.sh
#!/usr/bin/env bash
# Session 16 call 6: a process's first query over cold GpuCachedTables (SSB SF10 q1.1): the
# runner's untimed checked run is the process's first GPU query; its timeline shows the pinned
# staging memory being allocated. Then the 3 cold timed runs for comparison.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o70; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1; echo "data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 90 $cli bench ssb --sf 10 --iterations 3 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-first-query.log 2>&1
echo "rc=$? at $(el) s"
grep -c "pinned pool: allocated" $out/ssb-first-query.log
grep -E "rule: starts|timed run|final state downloaded|upload: [0-9]{4,}" $out/ssb-first-query.log | cut -c45-200 | head -12
grep "pinned pool: allocated" $out/ssb-first-query.log | head -3 | cut -c45-200
grep "pinned pool: allocated" $out/ssb-first-query.log | tail -2 | cut -c45-200
grep -E "^q1.1" $out/ssb-first-query.log
gzip $out/*.log; cd $out && tar czf $OUT/t70.tar.gz .
