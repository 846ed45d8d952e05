#!/usr/bin/env bash
# Session 8, last call: SSB SF10 over the same in-memory tables without the table cache (the
# baseline of the cached run, same machine), and the timeline of q3.4 with the cache (where a
# query's time goes before the rule: DataFusion's planning over 8,192-row batches).
set -uo pipefail
out=/tmp/o19; rm -rf $out; mkdir -p $out/records
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
RUST_LOG=datafusion_gpu::timeline=debug timeout 100 $cli bench ssb --sf 10 --iterations 2 --queries 3.4 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --no-save > $out/ssb-q3.4-cached-timeline.log 2>&1; echo "timeline rc=$?"
grep -E "bench: (timed run starts|planned|timed run ends)|rule: (starts|operators placed)" $out/ssb-q3.4-cached-timeline.log | cut -c45-200 | tail -5
timeout 250 $cli bench ssb --sf 10 --iterations 3 --data /tmp/dfg-data --out $out/records --label pageable > $out/ssb-pageable.log 2>&1
echo "ssb pageable rc=$?: $(grep -h 'total:' $out/ssb-pageable.log) $(grep -h 'results:' $out/ssb-pageable.log)"
grep -E "^q[0-9]" $out/ssb-pageable.log
cd $out && tar czf $OUT/t19.tar.gz .
