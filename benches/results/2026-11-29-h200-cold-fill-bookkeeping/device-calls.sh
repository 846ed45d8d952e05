# ===== call1/t75.sh
#!/usr/bin/env bash
# Session 18 call 1: cold SSB SF10 over GpuCachedTable after the cache fill stopped making a batch
# per host batch (column-wise assembly, one shared handle of the host arrays per cache entry),
# beside DuckDB 2.0.1 in the same call; the same with streaming stores into the staging slots;
# timeline of cold q1.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o75; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
timeout 120 $cli bench ssb --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold-10 > $out/ssb-cold-10.log 2>&1
echo "ssb rc=$? at $(el) s: $(grep -h 'total:' $out/ssb-cold-10.log)"
timeout 120 $cli bench ssb --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --gpu-set gpu.experimental.streaming_stores=true --out $out/records --label cold-nt-10 > $out/ssb-cold-nt-10.log 2>&1
echo "ssb nt rc=$? at $(el) s: $(grep -h 'total:' $out/ssb-cold-nt-10.log)"
timeout 100 python3 scripts/duckdb-peer.py ssb 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/ssb 10 $out/duckdb-ssb.json > $out/duckdb-ssb.log 2>&1
echo "duckdb rc=$? at $(el) s"
for l in cold-10 cold-nt-10; do
  r=$(ls $out/records/*-ssb-sf10-$l.json 2>/dev/null | head -1)
  echo "== $l"; [ -n "$r" ] && python3 scripts/beside-duckdb.py $r $out/duckdb-ssb.json | tail -15
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,4.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
echo "timeline at $(el) s"
grep -E "upload: [0-9]{4,}|timed run|assembled|columns staged|columns cached|uploaded|planned|rule: starts" $out/ssb-cold-timeline.log | tail -24 | cut -c40-200
gzip $out/*.log
cd $out && tar czf $OUT/t75.tar.gz .
# ===== call2/t76.sh
#!/usr/bin/env bash
# Session 18 call 2: the narrowing copies built for AVX2 too (picked at run time), with
# gpu.transfer.narrow_offsets off (default) and on; cold SSB and TPC-H SF10 over GpuCachedTable
# beside DuckDB 2.0.1 in the same call; SSB default run twice to see the spread between processes.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o76; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3|Flags" | sed 's/Flags:.*\(avx2\).*\(avx512bw\)\?.*/Flags: avx2 \2/' > $out/lscpu.txt
grep -o -w 'avx512bw\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
run() { # suite label extra...
  local suite=$1 label=$2; shift 2
  timeout 150 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label $label "$@" > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log)"
}
run ssb cold-a
run ssb cold-for --gpu-set gpu.transfer.narrow_offsets=true
run ssb cold-b
timeout 100 python3 scripts/duckdb-peer.py ssb 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/ssb 10 $out/duckdb-ssb.json > $out/duckdb-ssb.log 2>&1
echo "duckdb ssb rc=$? at $(el) s"
run tpch cold-a
run tpch cold-for --gpu-set gpu.transfer.narrow_offsets=true
timeout 120 python3 scripts/duckdb-peer.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 10 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb tpch rc=$? at $(el) s"
for suite in ssb tpch; do for l in cold-a cold-for cold-b; do
  r=$(ls $out/records/*-$suite-sf10-$l.json 2>/dev/null | head -1)
  [ -n "$r" ] && echo "== $suite $l: $(python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -1)"
done; done
gzip $out/*.log
cd $out && tar czf $OUT/t76.tar.gz .
# ===== call3/t77.sh
#!/usr/bin/env bash
# Session 18 call 3: pinned chunks looked up without the pool's lock per piece; cold SSB SF10
# with 32 MiB (default), 64 MiB and 128 MiB staging slots beside DuckDB 2.0.1; timeline of q1.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o77; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3|Flags" | sed 's/Flags:.*\(avx2\).*\(avx512bw\)\?.*/Flags: avx2 \2/' > $out/lscpu.txt
grep -o -w 'avx512bw\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
run() { # suite label extra...
  local suite=$1 label=$2; shift 2
  timeout 150 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label $label "$@" > $out/$suite-$label.log 2>&1
  echo "$suite $label rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-$label.log)"
}
run ssb cold-a
run ssb cold-s64 --gpu-set gpu.transfer.staging_buffer_size=64M
run ssb cold-s128 --gpu-set gpu.transfer.staging_buffer_size=128M
timeout 100 python3 scripts/duckdb-peer.py ssb 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/ssb 10 $out/duckdb-ssb.json > $out/duckdb-ssb.log 2>&1
echo "duckdb ssb rc=$? at $(el) s"
for l in cold-a cold-s64 cold-s128; do
  r=$(ls $out/records/*-ssb-sf10-$l.json 2>/dev/null | head -1)
  [ -n "$r" ] && echo "== ssb $l: $(python3 scripts/beside-duckdb.py $r $out/duckdb-ssb.json | tail -1)"
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
awk '/timed run starts/{n++} n==2' $out/ssb-cold-timeline.log | grep -E "upload|timed run|cached scan|planned|rule: starts|aggregate Final" | cut -c50-200 | head -40
gzip $out/*.log
cd $out && tar czf $OUT/t77.tar.gz .
# ===== call4/t78.sh
#!/usr/bin/env bash
# Session 18 call 4: the GPU suite on the final build (b62d265); every TPC-H and SSB query at
# SF1 over GpuCachedTable with the defaults, answers checked against DataFusion.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o78; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/b.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 450 /tmp/b/dfg-tests --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked|failed" $out/tests.log | head -10
grep -c '^test .* ok$' $out/tests.log
for suite in tpch ssb; do
  timeout 60 $cli bench $suite --sf 1 --iterations 1 --cpu-iterations 0 --residency cached --no-save > $out/$suite-sf1.log 2>&1
  echo "$suite SF1 rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1.log)"
done
gzip $out/*.log
cd $out && tar czf $OUT/t78.tar.gz .
# ===== call5/t79.sh
#!/usr/bin/env bash
# Session 18 call 5: the final build (b62d265) beside DuckDB 2.0.1 in one call: cold SSB and
# TPC-H SF10 over GpuCachedTable (cache emptied before each of 10 timed runs a query, every
# answer checked), DuckDB with 16 threads on the same Parquet and query texts (10 runs after a
# warm-up); bench transfer (the host's copy rate, for the cold floors); timeline of cold q1.1.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o79; rm -rf $out; mkdir -p $out/records /tmp/b
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
for suite in ssb tpch; do
  timeout 150 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --out $out/records --label cold-10 > $out/$suite-cold-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-cold-10.log)"
  timeout 100 python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cold-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -1
done
RUST_LOG=datafusion_gpu::timeline=debug timeout 40 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1 --data /tmp/dfg-data --residency cached --cold --no-save > $out/ssb-cold-timeline.log 2>&1
grep 'timed run ends' $out/ssb-cold-timeline.log | cut -c60-
gzip $out/*.log
cd $out && tar czf $OUT/t79.tar.gz .
# ===== call6/t80.sh
#!/usr/bin/env bash
# Session 18 call 6: `bench --peer duckdb` (DuckDB 2.0.0 bundled in the binary, the `duckdb`
# feature, built from bb9678b) on a device for the first time: cold SSB and TPC-H SF10 over
# GpuCachedTable, 10 timed runs a query on each side, every answer of both engines checked
# against DataFusion's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o80; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli-duck.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lscpu | grep -E "Model name|^CPU\(s\)|L3" > $out/lscpu.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  timeout 130 $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --cold --peer duckdb --out $out/records --label cold-peer > $out/$suite-cold-peer.log 2>&1
  echo "$suite rc=$? at $(el) s"
  grep -E "^peer:|results:|DuckDB's rows|geomean|total" $out/$suite-cold-peer.log
done
gzip $out/*.log
cd $out && tar czf $OUT/t80.tar.gz .
