# ===== call1/t16.sh
#!/usr/bin/env bash
# Session 8 call 1 (gpu.table_cache): the cache's and the resident tests; SF1 TPC-H and SSB over
# pageable in-memory tables with the table cache, every operator on the GPU (answers checked,
# the checked run fills the cache, the timed run reads it); SF10 both suites with the cache
# (3 timed runs after the checked run) beside DuckDB 2.0.1, same machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o16; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
[ -n "${SKIP_TESTS:-}" ] || timeout 120 $lib --test-threads 1 --nocapture cached resident session > $out/tests-cache.log 2>&1; echo "cache + resident tests rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test |^test result|panicked" $out/tests-cache.log | head -20
for suite in tpch ssb; do
  timeout 100 $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --gpu-min-rows 0 --gpu-set gpu.placement=always --gpu-set gpu.table_cache=true --explain --no-save > $out/$suite-sf1-cached-always.log 2>&1
  echo "$suite SF1 cached, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-always.log)"
done
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 220 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --out $out/records --label cached > $out/$suite-cached.log 2>&1
  echo "$suite cached rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached.log) $(grep -h 'results:' $out/$suite-cached.log)"
  left=$(( 570 - $(el) )); [ $left -lt 40 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t16.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-cached.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-cached-ms ratio rows check")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('ok')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
# ===== call3/t17.sh
#!/usr/bin/env bash
# Session 8 call 3: where the cached scans' time goes: SSB q1.1 and q3.4 at SF10 with the table
# cache and with resident tables, EXPLAIN ANALYZE of each and the timeline of q1.1 cached.
set -uo pipefail
out=/tmp/o17; rm -rf $out; mkdir -p $out
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
[ -x $cli ] || { mkdir -p /tmp/b; xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*; }
[ -d /tmp/dfg-data/ssb-sf10 ] || timeout 150 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
timeout 150 $cli bench ssb --sf 10 --iterations 3 --queries 1.1,3.4 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --explain --no-save > $out/ssb-cached-explain.log 2>&1; echo "cached rc=$?"
timeout 150 $cli bench ssb --sf 10 --iterations 3 --queries 1.1,3.4 --data /tmp/dfg-data --residency gpu --explain --no-save > $out/ssb-resident-explain.log 2>&1; echo "resident rc=$?"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench ssb --sf 10 --iterations 2 --queries 1.1 --data /tmp/dfg-data --gpu-set gpu.table_cache=true --no-save > $out/ssb-cached-timeline.log 2>&1; echo "timeline rc=$?"
grep -E "^q[0-9]" $out/*explain.log | grep -v "with the"
cd $out && tar czf $OUT/t17.tar.gz . 
# ===== call4/t18.sh
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
# ===== call7/t19.sh
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
# ===== call8/t20.sh
#!/usr/bin/env bash
# Session 8, call 8: GpuCachedTable (the table cache behind a TableProvider with its statistics
# computed once): the cache tests, then TPC-H SF10 with --residency cached (3 timed runs after the
# checked run that fills the cache) beside DuckDB 2.0.1; SSB likewise if time is left.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o20; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 60 $lib --test-threads 1 --nocapture cached_scan_tests resident_tests > $out/tests-cache.log 2>&1; echo "cache + resident tests rc=$? at $(el) s"
grep -E "^test |^test result|panicked" $out/tests-cache.log | head
for suite in tpch ssb; do
  left=$(( 270 - $(el) )); [ $left -lt 120 ] && { echo "no time for $suite"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout $(( 280 - $(el) )) $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  timeout 60 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
  python3 - $out $suite <<'PY'
import json, glob, math, sys
out, suite = sys.argv[1], sys.argv[2]
try:
    duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
    gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached-table.json")[0]))["queries"]}
except Exception as e:
    print(suite, "missing", e); sys.exit(0)
r = []
for q, d in duck.items():
    g = gpu.get(q, {})
    if g.get("gpu_ms") and d.get("ms"):
        r.append(d["ms"] / g["gpu_ms"])
        print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('ok')}")
print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
done
cd $out && tar czf $OUT/t20.tar.gz .
