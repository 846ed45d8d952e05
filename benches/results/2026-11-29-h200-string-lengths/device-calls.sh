# ===== call1/t71.sh
#!/usr/bin/env bash
# Session 17 call 1: the GPU suite on the build whose cache fills send string offsets as row
# lengths (SF10 data generated beside it); then SSB and TPC-H SF10 over GpuCachedTable with the
# cache emptied before each timed GPU run (--cold), 3 timed runs a query; timelines of cold TPC-H
# q1 and q19.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o71; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
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
run tpch cold
run ssb cold
RUST_LOG=datafusion_gpu::timeline=debug timeout 60 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 1,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timeline tpch at $(el) s"
grep -E "upload: [0-9]+ columns|pieces, [0-9.]+GiB|timed run|rule: starts" $out/tpch-cold-timeline.log | tail -12 | cut -c45-230
gzip $out/*.log
cd $out && tar czf $OUT/t71.tar.gz .
# ===== call2/t72.sh
#!/usr/bin/env bash
# Session 17 call 2: the GPU suite on the build whose string layout reads each view once (one pass a
# range, huge pages); SF10 data generated beside it; SSB and TPC-H SF10 over GpuCachedTable with
# the cache emptied before each timed GPU run (--cold), 3 timed runs a query; timelines of cold
# TPC-H q1 and q19; SF1 answers of both suites over GpuCachedTable with the defaults.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o72; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag | tee $out/thp.txt
( timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
  timeout 60 $cli bench tpch --sf 1 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-sf1-tpch.log 2>&1
  timeout 60 $cli bench ssb --sf 1 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-sf1-ssb.log 2>&1 ) &
timeout 330 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
wait; echo "data at $(el) s"
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  timeout 100 $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label $label "$@" > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-$label.log) $(grep -h 'results:' $out/$suite-$label.log)"
  grep -E "^q[0-9.]+ +[-0-9]" $out/$suite-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
run tpch cold
run ssb cold
RUST_LOG=datafusion_gpu::timeline=debug timeout 60 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 1,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timeline tpch at $(el) s"
grep -E "upload: [0-9]+ columns|pieces, [0-9.]+GiB|timed run|rule: starts" $out/tpch-cold-timeline.log | tail -12 | cut -c45-230
for suite in tpch ssb; do
  timeout 120 $cli bench $suite --sf 1 --iterations 1 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --no-save > $out/$suite-sf1-cached.log 2>&1
  echo "$suite SF1 cached rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-cached.log)"
done
gzip $out/*.log
cd $out && tar czf $OUT/t72.tar.gz .
# ===== call3/t73.sh
#!/usr/bin/env bash
# Session 17 call 3: issue 46's cold case on the final build (string offsets sent as 1-byte row
# lengths, each view read once; no huge-page advice). SSB and TPC-H SF10 over pageable in-memory
# tables registered as GpuCachedTable, the device's table cache emptied before each of 10 timed
# GPU runs a query (--cold), every answer checked; DuckDB 2.0.1 in the same call (16 threads, same
# Parquet and query texts, its own in-memory tables, 10 timed runs after a warm-up); timelines of
# cold TPC-H q1 and q19 and SSB q1.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o73; rm -rf $out; mkdir -p $out/records /tmp/b
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
RUST_LOG=datafusion_gpu::timeline=debug timeout 60 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 1,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
echo "timelines at $(el) s"
grep -E "upload: [0-9]{4,}|timed run ends" $out/ssb-cold-timeline.log $out/tpch-cold-timeline.log | tail -4 | cut -c60-230
gzip $out/*.log
cd $out && tar czf $OUT/t73.tar.gz .
# ===== call4/t74.sh
#!/usr/bin/env bash
# Session 17 call 4: the GPU suite on the final build (the review mend: the frame-of-reference
# sample taken lazily, one widen launch), SF10 data generated beside it; `bench transfer` (the
# host's copy rate into pinned memory, for the cold floors); SSB and TPC-H SF10 over
# GpuCachedTable, cache emptied before each timed GPU run (--cold), 3 timed runs a query.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o74; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
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
timeout 60 $cli bench transfer > $out/transfer.log 2>&1; echo "transfer rc=$? at $(el) s"
grep -iE "copy|staged|registered|download" $out/transfer.log | head -12
run tpch cold
run ssb cold
gzip $out/*.log
cd $out && tar czf $OUT/t74.tar.gz .
