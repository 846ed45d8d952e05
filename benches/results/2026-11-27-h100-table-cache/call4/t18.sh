#!/usr/bin/env bash
# Session 8, final calls (gpu.table_cache with memoised scan statistics): STAGE=suite runs the GPU
# library suite; STAGE=tpch|ssb runs that suite at SF10 over in-memory tables with the table cache
# (3 timed runs after the checked run that fills it) beside DuckDB 2.0.1, same machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o18-$STAGE; rm -rf $out; mkdir -p $out/records /tmp/b
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
[ -f /tmp/b/unpacked-$(md5sum < .device/res.tar.xz | cut -c1-8) ] || { xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*; touch /tmp/b/unpacked-$(md5sum < .device/res.tar.xz | cut -c1-8); }
[ -d /tmp/site/duckdb ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
if [ $STAGE = suite ]; then
  timeout 560 $lib --test-threads 2 > $out/tests-lib.log 2>&1; echo "GPU library suite rc=$? at $(el) s"
  grep -E "^test result|FAILED|panicked|SKIPPED" $out/tests-lib.log | head -20
else
  suite=$STAGE; q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  [ -d /tmp/dfg-data/$suite-sf10 ] || timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 300 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --out $out/records --label cached > $out/$suite-cached.log 2>&1
  echo "$suite cached rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached.log) $(grep -h 'results:' $out/$suite-cached.log)"
  timeout 150 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
  python3 - $out $suite <<'PY'
import json, glob, math, sys
out, suite = sys.argv[1], sys.argv[2]
duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached.json")[0]))["queries"]}
r = []
print(f"{suite}: query DuckDB-ms GPU-cached-ms ratio rows check")
for q, d in duck.items():
    g = gpu.get(q, {})
    if g.get("gpu_ms") and d.get("ms"):
        r.append(d["ms"] / g["gpu_ms"])
        print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('ok')}")
print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
fi
cd $out && tar czf $OUT/t18-$STAGE.tar.gz . 
