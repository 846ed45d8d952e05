# ===== call1/t81.sh
#!/usr/bin/env bash
# Session 19 call 1: host images of cached tables. The GPU suite on the build; every TPC-H and
# SSB query at SF1 over GpuCachedTable with the defaults (host images on), answers checked; cold
# SSB SF10 with host images on and off (same process data, 10 runs a query, answers checked);
# timeline of cold q1.1 with images.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o81; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 60 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait
grep -E "^test result|FAILED|panicked|failed" $out/tests.log | head -10
grep -c '^test .* ok$' $out/tests.log
for suite in tpch ssb; do
  timeout 50 $cli bench $suite --sf 1 --iterations 1 --cpu-iterations 0 --residency cached --no-save > $out/$suite-sf1.log 2>&1
  echo "$suite SF1 rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1.log) $(grep -ho 'host images[^)]*)' $out/$suite-sf1.log) $(grep -ho 'placed in [0-9.]* s' $out/$suite-sf1.log)"
done
for img in true false; do
  [ $(el) -gt 480 ] && break
  timeout 75 $cli bench ssb --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --gpu-set table_cache.host_image=$img --out $out/records --label cold-image-$img > $out/ssb-cold-image-$img.log 2>&1
  echo "ssb image=$img rc=$? at $(el) s: $(grep -h 'results:' $out/ssb-cold-image-$img.log) $(grep -ho 'host images[^)]*)' $out/ssb-cold-image-$img.log) $(grep -ho 'placed in [0-9.]* s' $out/ssb-cold-image-$img.log)"
done
[ $(el) -lt 540 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t81.tar.gz .
# ===== call2/t82.sh
#!/usr/bin/env bash
# Session 19 call 2: host images beside DuckDB 2.0.1 in one call. Cold SSB and TPC-H SF10 over
# GpuCachedTable (cache emptied before each of 10 timed runs a query, every answer checked) with
# host images (the default) and without (gpu.table_cache.host_image=false); DuckDB with 16
# threads on the same Parquet and query texts (10 runs after a warm-up); bench transfer (the
# host's copy rate, for the cold floors); timeline of cold q1.1 with images.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o82; rm -rf $out; mkdir -p $out/records /tmp/b
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
timeout 60 $cli bench transfer > $out/transfer.log 2>&1; echo "transfer rc=$? at $(el) s"
grep -iE "host copy|pinned|staged" $out/transfer.log | head -6
run() { # suite image
  timeout 120 $cli bench $1 --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --gpu-set gpu.table_cache.host_image=$2 --out $out/records --label cold-image-$2 > $out/$1-cold-image-$2.log 2>&1
  echo "$1 image=$2 rc=$? at $(el) s: $(grep -h 'results:' $out/$1-cold-image-$2.log) $(grep -ho 'host images[^)]*), placed in [0-9.]* s' $out/$1-cold-image-$2.log)"
  r=$(ls $out/records/*-$1-sf10-cold-image-$2.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$1.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$1.json | tail -1
}
for suite in ssb tpch; do
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  run $suite true
done
[ $(el) -lt 440 ] && run ssb false
[ $(el) -lt 470 ] && run tpch false
[ $(el) -lt 560 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 30 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t82.tar.gz .
# ===== call3/t83.sh
#!/usr/bin/env bash
# Session 19 call 3: host images beside DuckDB 2.0.1 again, on another machine. Cold SSB and
# TPC-H SF10 over GpuCachedTable (cache emptied before each of 10 timed runs a query, every answer
# checked) with host images (the default), with images and streaming stores
# (gpu.experimental.streaming_stores), and SSB without images; DuckDB with 16 threads on the same
# Parquet and query texts (10 runs after a warm-up); bench transfer (the host's copy rate);
# timeline of cold q1.1 with images.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o83; rm -rf $out; mkdir -p $out/records /tmp/b
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
timeout 60 $cli bench transfer > $out/transfer.log 2>&1; echo "transfer rc=$? at $(el) s"
grep -iE "host copy|pinned|staged" $out/transfer.log | head -6
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--gpu-set "$kv"); done
  timeout 120 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold "${sets[@]}" --out $out/records --label cold-$label > $out/$suite-cold-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-cold-$label.log) $(grep -ho 'host images[^)]*), placed in [0-9.]* s' $out/$suite-cold-$label.log)"
  r=$(ls $out/records/*-$suite-sf10-cold-$label.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -1
}
for suite in ssb tpch; do
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  run $suite image gpu.table_cache.host_image=true
  run $suite image-streaming gpu.table_cache.host_image=true gpu.experimental.streaming_stores=true
done
[ $(el) -lt 440 ] && run ssb no-image gpu.table_cache.host_image=false
[ $(el) -lt 560 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 30 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t83.tar.gz .
# ===== call4/t84.sh
#!/usr/bin/env bash
# Session 19 call 4: issue 46's acceptance on main (d1ddd67) in one call, beside DuckDB 2.0.1.
# SF10 over GpuCachedTable, every answer checked, 10 timed runs a query: warm (columns cached by
# the checked run) and cold (cache emptied before each run, host images on, the default);
# DuckDB with 16 threads on the same Parquet and query texts (10 runs after a warm-up); SF1 with
# EXPLAIN: no CpuFallbackExec, FilterExec or DataSourceExec in any plan.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o84; rm -rf $out; mkdir -p $out/records /tmp/b
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
run() { # suite label extra-args...
  local suite=$1 label=$2; shift 2
  timeout 120 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached "$@" --out $out/records --label $label > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log)"
  r=$(ls $out/records/*-$suite-sf10-$label.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -1
}
for suite in ssb tpch; do
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  run $suite warm
  run $suite cold --cold
done
for suite in tpch ssb; do
  [ $(el) -gt 540 ] && break
  timeout 40 $cli bench $suite --sf 1 --iterations 1 --residency cached --explain --no-save > $out/$suite-sf1-explain.log 2>&1
  echo "$suite SF1 explain rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-explain.log); CPU nodes: $(grep -cE '^ +(CpuFallbackExec|FilterExec|DataSourceExec)' $out/$suite-sf1-explain.log)"
done
gzip $out/*.log
cd $out && tar czf $OUT/t84.tar.gz .
# ===== call5/t85.sh
#!/usr/bin/env bash
# Session 19 call 5: host images with 3-byte frames of reference (keys, prices and revenues of up
# to 2^24 values). The GPU suite on the build; cold SSB SF10 with images and without, and cold
# TPC-H SF10 with images (10 runs a query, every answer checked); timeline of cold q1.1 and q4.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o85; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
( timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait; echo "data at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--gpu-set "$kv"); done
  timeout 90 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold "${sets[@]}" --out $out/records --label cold-$label > $out/$suite-cold-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-cold-$label.log) $(grep -ho 'host images[^)]*), placed in [0-9.]* s' $out/$suite-cold-$label.log)"
  grep -E "^q[0-9.]+ " $out/$suite-cold-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
run ssb image gpu.table_cache.host_image=true
run ssb no-image gpu.table_cache.host_image=false
[ $(el) -lt 480 ] && run tpch image gpu.table_cache.host_image=true
[ $(el) -lt 540 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,4.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t85.tar.gz .
