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
