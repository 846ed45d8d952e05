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
