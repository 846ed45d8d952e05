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
