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
