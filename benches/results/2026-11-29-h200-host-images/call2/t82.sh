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
