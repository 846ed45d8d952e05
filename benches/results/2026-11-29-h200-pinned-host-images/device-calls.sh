# ===== call1/t86.sh
#!/usr/bin/env bash
# Session 20 call 1: host images in page-locked memory (gpu.table_cache.host_image_pinned).
# The GPU suite on the build; cold SSB SF10 with pinned images and with pageable ones (same call),
# cold TPC-H SF10 with pinned images (10 runs a query, every answer checked); timeline of cold
# q1.1 and q4.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o86; rm -rf $out; mkdir -p $out/records /tmp/b
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
grep -hiE "generat|wrote|parquet" $out/gen-*.log | head -6
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--gpu-set "$kv"); done
  timeout 90 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold "${sets[@]}" --out $out/records --label cold-$label > $out/$suite-cold-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-cold-$label.log) $(grep -ho 'host images[^)]*)[^)]*), placed in [0-9.]* s' $out/$suite-cold-$label.log)"
  grep -E "^q[0-9.]+ " $out/$suite-cold-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
run ssb pinned gpu.table_cache.host_image_pinned=true
run ssb pageable gpu.table_cache.host_image_pinned=false
[ $(el) -lt 470 ] && run tpch pinned gpu.table_cache.host_image_pinned=true
[ $(el) -lt 540 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,4.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
grep -E 'upload: [0-9]+ pieces, [0-9.]+[MG]iB' $out/ssb-cold-timeline.log | cut -c60- | tail -4
gzip $out/*.log
cd $out && tar czf $OUT/t86.tar.gz .
# ===== call2/t87.sh
#!/usr/bin/env bash
# Session 20 call 2: the GPU suite on 06aa2d7 (pinned images with joined string parts); cold
# TPC-H SF10 with pinned images and with pageable ones, cold SSB SF10 with pinned images (10 runs
# a query, every answer checked); timeline of cold TPC-H q12 and q19.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o87; rm -rf $out; mkdir -p $out/records /tmp/b
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
grep -hiE "generat|wrote|parquet" $out/gen-*.log | head -6
run() { # suite label settings...
  local suite=$1 label=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--gpu-set "$kv"); done
  timeout 90 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold "${sets[@]}" --out $out/records --label cold-$label > $out/$suite-cold-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-cold-$label.log) $(grep -ho 'host images[^)]*)[^)]*), placed in [0-9.]* s' $out/$suite-cold-$label.log)"
  grep -E "^q[0-9.]+ " $out/$suite-cold-$label.log | awk '{printf "%s %s  ", $1, $3} END {print ""}'
}
run tpch pinned gpu.table_cache.host_image_pinned=true
run tpch pageable gpu.table_cache.host_image_pinned=false
[ $(el) -lt 480 ] && run ssb pinned gpu.table_cache.host_image_pinned=true
[ $(el) -lt 540 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench tpch --sf 10 --iterations 2 --cpu-iterations 0 --queries 12,19 --data /tmp/dfg-data --residency cached --cold --no-save > $out/tpch-cold-timeline.log 2>&1
grep 'timed run ends' $out/tpch-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t87.tar.gz .
# ===== call3/t88.sh
#!/usr/bin/env bash
# Session 20 call 3: issue 46's acceptance on main (06aa2d7) in one call, beside DuckDB 2.0.1.
# SF10 over GpuCachedTable, every answer checked, 10 timed runs a query: warm (columns cached by
# the checked run) and cold (cache emptied before each run, host images on and pinned, the
# defaults);
# DuckDB with 16 threads on the same Parquet and query texts (10 runs after a warm-up); SF1 with
# EXPLAIN: no CpuFallbackExec, FilterExec or DataSourceExec in any plan.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o88; rm -rf $out; mkdir -p $out/records /tmp/b
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
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log) $(grep -ho 'host images[^)]*)[^)]*), placed in [0-9.]* s' $out/$suite-$label.log)"
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
[ $(el) -lt 500 ] && run ssb cold-pageable-images --cold --gpu-set gpu.table_cache.host_image_pinned=false
gzip $out/*.log
cd $out && tar czf $OUT/t88.tar.gz .
# ===== call4/t89.sh
#!/usr/bin/env bash
# Session 20 call 4: TPC-H SF50 on the H200, GPU-resident (GpuCachedTable, warm), beside DuckDB
# 2.0.1 on the same Parquet and query texts. Parquet generated by the runner (row groups encoded
# on all cores). No host images (SF50's Arrow batches take most of the host's 128 GiB); the table
# cache may hold 100 GB. 3 timed runs a query each side, every GPU answer checked against
# DataFusion's CPU answer.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o89; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
free -g | head -2 | tee $out/free.txt
timeout 220 $cli bench tpch --sf 50 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data rc=$? at $(el) s"; du -sh /tmp/dfg-data/tpch-sf50 2>/dev/null; grep -h "loaded in" $out/gen-tpch.log | cut -c1-200
left=$(( 330 - $(el) ))
[ $left -gt 40 ] && timeout $left python3 scripts/duckdb-peer.py tpch 50 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 3 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb rc=$? at $(el) s"; tail -3 $out/duckdb-tpch.log
left=$(( 545 - $(el) ))
[ $left -gt 60 ] && timeout $left $cli bench tpch --sf 50 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --gpu-set gpu.table_cache.host_image=false --gpu-set gpu.table_cache.limit=100G --out $out/records --label sf50-cached-3 > $out/tpch-sf50.log 2>&1
echo "tpch SF50 rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-sf50.log) $(grep -h 'results:' $out/tpch-sf50.log)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
r=$(ls $out/records/*-tpch-sf50-sf50-cached-3.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-tpch.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-tpch.json | tail -26
gzip $out/*.log
cd $out && tar czf $OUT/t89.tar.gz .
# ===== call5/t90.sh
#!/usr/bin/env bash
# Session 20 call 5: a second machine for issue 46's cold case on 06aa2d7, beside DuckDB 2.0.1.
# SF10 over GpuCachedTable with the defaults (host images on and pinned); 10 timed runs a query,
# every answer checked: cold (cache emptied before each run) for both suites, warm SSB; DuckDB
# with 16 threads on the same Parquet and query texts (10 runs after a warm-up).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o90; rm -rf $out; mkdir -p $out/records /tmp/b
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
  timeout 90 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached "$@" --out $out/records --label $label > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log)"
  r=$(ls $out/records/*-$suite-sf10-$label.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json > $out/beside-$suite-$label.txt && tail -1 $out/beside-$suite-$label.txt
}
timeout 60 python3 scripts/duckdb-peer.py ssb 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/ssb 10 $out/duckdb-ssb.json > $out/duckdb-ssb.log 2>&1
echo "duckdb ssb rc=$? at $(el) s"
run ssb cold --cold
timeout 80 python3 scripts/duckdb-peer.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 10 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb tpch rc=$? at $(el) s"
[ $(el) -lt 200 ] && run tpch cold --cold
[ $(el) -lt 250 ] && run ssb warm
gzip $out/*.log
cd $out && tar czf $OUT/t90.tar.gz .
