# ===== duck.py
"""DuckDB beside the runner, on the same machine: loads the runner's Parquet (DIR/<suite>-sf<SF>/*.parquet)
into DuckDB's own in-memory tables, runs the runner's query texts with 16 threads, one warm-up run then
N timed runs a query, and prints the median of each with its row count; writes JSON.
   usage: python3 duck.py SUITE SF DATA_DIR QUERY_DIR RUNS OUT.json"""
import glob, json, os, statistics, sys, time
import duckdb

suite, sf, data, qdir, runs, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
con = duckdb.connect(":memory:")
con.execute("SET threads = 16")
t = time.time()
folder = os.path.join(data, f"{suite}-sf{sf}")
for f in sorted(glob.glob(os.path.join(folder, "*.parquet"))):
    name = os.path.basename(f)[:-len(".parquet")]
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{f}')")
load = time.time() - t
print(f"DuckDB {duckdb.__version__}: {suite} SF {sf} loaded from {folder} in {load:.1f} s", flush=True)

def key(p):
    return [int(x) for x in os.path.basename(p)[1:-4].split(".")]

report = {"duckdb": duckdb.__version__, "suite": suite, "sf": sf, "load_seconds": load, "runs": runs, "queries": []}
for path in sorted(glob.glob(os.path.join(qdir, "q*.sql")), key=key):
    q = os.path.basename(path)[:-4]
    sql = open(path).read()
    try:
        rows = len(con.execute(sql).fetchall())
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            con.execute(sql).fetchall()
            times.append((time.perf_counter() - t) * 1000)
        ms = statistics.median(times)
        print(f"{q:<6} {ms:9.1f} ms  rows {rows}", flush=True)
        report["queries"].append({"query": q, "ms": ms, "runs_ms": times, "rows": rows})
    except Exception as e:
        print(f"{q:<6} error: {e}", flush=True)
        report["queries"].append({"query": q, "error": str(e)})
json.dump(report, open(out, "w"), indent=1)
# ===== call1/t8.sh
#!/usr/bin/env bash
# Session 7 call 1: the library suite (resident tests included) on main 26d3ade, then TPC-H and SSB
# SF10 with GPU-resident tables and --explain (EXPLAIN ANALYZE of every query) to see where the
# slow queries spend their time.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o8; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 150 $lib --test-threads 2 > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test result|FAILED|panicked" $out/tests-lib.log | head -20
grep -E "^test .*resident" $out/tests-lib.log
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 1 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu-explain > $out/$suite-gpu-explain.log 2>&1
  echo "$suite gpu explain rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu-explain.log) $(grep -h 'results:' $out/$suite-gpu-explain.log)"
done
cd $out && tar czf $OUT/t8.tar.gz . ; cd - >/dev/null
grep -E "^q[0-9.]+ " $out/tpch-gpu-explain.log $out/ssb-gpu-explain.log | head -40
# ===== call2/t9.sh
#!/usr/bin/env bash
# Session 7 call 2: the GPU suite's library tests (the join differential tests but the
# repartition one left out for time), the resident-table tests; then per suite at SF10 the
# runner with GPU-resident tables (3 timed runs, EXPLAIN ANALYZE of each query) and DuckDB 2.0.1
# on the same Parquet and query texts, one machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o9; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 120 $lib --test-threads 2 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests (join::tests skipped) rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test result|FAILED|panicked" $out/tests-lib.log | head
timeout 100 $lib --test-threads 1 --nocapture resident gpu_joins_without_repartitions_match_cpu > $out/tests-resident-join.log 2>&1; echo "resident + join-repartition tests rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test |^test result|joins without repartitions" $out/tests-resident-join.log
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu > $out/$suite-gpu.log 2>&1
  echo "$suite gpu rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu.log) $(grep -h 'results:' $out/$suite-gpu.log)"
  timeout 120 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t9.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-resident-ms ratio rows")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('check')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}")
PY
# ===== call3/t10.sh
#!/usr/bin/env bash
# Session 7 call 3 (lopsided joins swapped): the GPU suite's library tests (the join differential tests but the
# repartition one left out for time), the resident-table tests; then per suite at SF10 the
# runner with GPU-resident tables (3 timed runs, EXPLAIN ANALYZE of each query) and DuckDB 2.0.1
# on the same Parquet and query texts, one machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o10; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 120 $lib --test-threads 2 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests (join::tests skipped) rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test result|FAILED|panicked" $out/tests-lib.log | head
timeout 100 $lib --test-threads 1 --nocapture resident gpu_joins_without_repartitions_match_cpu > $out/tests-resident-join.log 2>&1; echo "resident + join-repartition tests rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test |^test result|joins without repartitions" $out/tests-resident-join.log
mkdir -p $out/fuzz
for s in 401 402 403 404; do
  ( XDG_CACHE_HOME=/tmp/dfg-cache-$s timeout 80 $cli fuzz --queries 400 --seed $s --repro-dir $out/fuzz/repro-$s > $out/fuzz/fuzz-seed$s.log 2>&1; echo "fuzz seed $s rc=$? at $(el) s" >> $out/fuzz/rc.txt ) &
done
wait
sort $out/fuzz/rc.txt; for f in $out/fuzz/fuzz-seed*.log; do tail -1 $f; done
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu > $out/$suite-gpu.log 2>&1
  echo "$suite gpu rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu.log) $(grep -h 'results:' $out/$suite-gpu.log)"
  timeout 120 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t10.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-resident-ms ratio rows")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('check')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}")
PY
# ===== call4/t11.sh
#!/usr/bin/env bash
# Session 7 call 4 (swaps only where the build size is sure): the GPU suite's library tests (the join differential tests but the
# repartition one left out for time), the resident-table tests; then per suite at SF10 the
# runner with GPU-resident tables (3 timed runs, EXPLAIN ANALYZE of each query) and DuckDB 2.0.1
# on the same Parquet and query texts, one machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o11; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu > $out/$suite-gpu.log 2>&1
  echo "$suite gpu rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu.log) $(grep -h 'results:' $out/$suite-gpu.log)"
  timeout 120 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
for suite in tpch ssb; do
  left=$(( 570 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 0 --data /tmp/dfg-data --residency gpu --gpu-min-rows 0 --no-save > $out/$suite-sf1-resident-always.log 2>&1
  echo "$suite SF1 resident, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-resident-always.log)"
done
cd $out && tar czf $OUT/t11.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-resident-ms ratio rows")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('check')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}")
PY
# ===== call5/t12.sh
#!/usr/bin/env bash
# Session 7 call 5 (resident tables keep their host batches for CPU parents): the GPU suite's library tests (the join differential tests but the
# repartition one left out for time), the resident-table tests; then per suite at SF10 the
# runner with GPU-resident tables (3 timed runs, EXPLAIN ANALYZE of each query) and DuckDB 2.0.1
# on the same Parquet and query texts, one machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o12; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 100 $lib --test-threads 1 --nocapture resident gpu_joins_without_repartitions_match_cpu > $out/tests-resident-join.log 2>&1; echo "resident + join-repartition tests rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test |^test result" $out/tests-resident-join.log
mkdir -p $out/fuzz
for s in 501 502 503 504; do
  ( XDG_CACHE_HOME=/tmp/dfg-cache-$s timeout 70 $cli fuzz --queries 300 --seed $s --repro-dir $out/fuzz/repro-$s > $out/fuzz/fuzz-seed$s.log 2>&1; echo "fuzz seed $s rc=$? at $(el) s" >> $out/fuzz/rc.txt ) &
done
wait
sort $out/fuzz/rc.txt; for f in $out/fuzz/fuzz-seed*.log; do tail -1 $f; done
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu > $out/$suite-gpu.log 2>&1
  echo "$suite gpu rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu.log) $(grep -h 'results:' $out/$suite-gpu.log)"
  timeout 120 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
left=$(( 560 - $(el) ))
[ $left -gt 60 ] && { timeout $left $cli bench tpch --sf 10 --iterations 2 --data /tmp/dfg-data --residency pageable --out $out/records --label pageable > $out/tpch-pageable.log 2>&1; echo "tpch pageable rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-pageable.log) $(grep -h 'results:' $out/tpch-pageable.log)"; }
for suite in tpch ssb; do
  left=$(( 585 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 0 --data /tmp/dfg-data --residency gpu --gpu-min-rows 0 --no-save > $out/$suite-sf1-resident-always.log 2>&1
  echo "$suite SF1 resident, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-resident-always.log)"
done
cd $out && tar czf $OUT/t12.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-resident-ms ratio rows")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('check')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}")
    f = glob.glob(f"{out}/records/*-{suite}-sf10-pageable.json")
    if f:
        pg = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
        r = [duck[q]["ms"] / pg[q]["gpu_ms"] for q in duck if pg.get(q, {}).get("gpu_ms") and duck[q].get("ms")]
        print(f"  pageable: total {sum(q['gpu_ms'] for q in pg.values()):.0f} ms, geomean vs DuckDB {math.exp(sum(map(math.log, r))/len(r)):.2f}x; slower: {sum(1 for x in r if x < 1)}")
PY
# ===== call6/t13.sh
#!/usr/bin/env bash
# Session 7 call 6: the GPU suite (library tests, the join differential tests included) on the
# final build; the resident tests with their output; TPC-H and SSB SF1 over resident tables with
# every operator on the GPU, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o13; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
timeout 100 $lib --test-threads 1 --nocapture resident > $out/tests-resident.log 2>&1; echo "resident tests rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test |^test result" $out/tests-resident.log
timeout 420 $lib --test-threads 2 > $out/tests-lib.log 2>&1; echo "GPU suite (library, join tests included) rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test result|FAILED|panicked" $out/tests-lib.log | head
for suite in tpch ssb; do
  left=$(( 585 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 0 --data /tmp/dfg-data --residency gpu --gpu-min-rows 0 --no-save > $out/$suite-sf1-resident-always.log 2>&1
  echo "$suite SF1 resident, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-resident-always.log)"
done
cd $out && tar czf $OUT/t13.tar.gz . ; cd - >/dev/null
# ===== call7/t14.sh
#!/usr/bin/env bash
# Session 7 call 7 (4ef8b55): TPC-H SF10 over resident tables with 10 timed runs a query and
# DuckDB 2.0.1 with 10 beside it; then the debug timeline (RUST_LOG) and EXPLAIN ANALYZE of the
# queries still slower than DuckDB (q2, q11, q22) and of q15 and q20.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o14; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
cli=/tmp/b/datafusion-gpu
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout 300 $cli bench tpch --sf 10 --iterations 10 --data /tmp/dfg-data --residency gpu --out $out/records --label gpu-10runs > $out/tpch-gpu-10runs.log 2>&1
echo "tpch gpu rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-gpu-10runs.log) $(grep -h 'results:' $out/tpch-gpu-10runs.log)"
timeout 120 python3 .device/duck.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 10 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "tpch duckdb rc=$? at $(el) s"
left=$(( 580 - $(el) ))
[ $left -gt 30 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench tpch --sf 10 --queries 2,11,15,20,22 --iterations 1 --data /tmp/dfg-data --residency gpu --explain --no-save > $out/tpch-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"
cd $out && tar czf $OUT/t14.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-tpch.json"))["queries"]}
gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-tpch-sf10-gpu-10runs.json")[0]))["queries"]}
r = []
for q, d in duck.items():
    g = gpu[q]; r.append(d["ms"] / g["gpu_ms"])
    print(f"  {q:<5}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x runs {len(g['gpu_runs_ms'])}/{len(d['runs_ms'])} {g.get('check')}")
print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x; slower {sum(1 for x in r if x < 1)}; totals {sum(g['gpu_ms'] for g in gpu.values()):.0f} / {sum(d['ms'] for d in duck.values()):.0f} ms")
PY
# ===== call8/t15.sh
#!/usr/bin/env bash
# Session 7 call 8: the runner's Parquet reads spread over every partition; TPC-H SF10 resident
# (5 timed runs) and DuckDB 2.0.1 beside it, then SSB SF10 the same way.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o15; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
cli=/tmp/b/datafusion-gpu
timeout 150 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout 300 $cli bench tpch --sf 10 --iterations 5 --data /tmp/dfg-data --residency gpu --out $out/records --label gpu > $out/tpch-gpu.log 2>&1
echo "tpch gpu rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-gpu.log) $(grep -h 'results:' $out/tpch-gpu.log)"
timeout 120 python3 .device/duck.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 5 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "tpch duckdb rc=$? at $(el) s"
timeout 150 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
left=$(( 560 - $(el) ))
timeout $left $cli bench ssb --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --out $out/records --label gpu > $out/ssb-gpu.log 2>&1
echo "ssb gpu rc=$? at $(el) s: $(grep -h 'total:' $out/ssb-gpu.log) $(grep -h 'results:' $out/ssb-gpu.log)"
left=$(( 590 - $(el) ))
timeout $left python3 .device/duck.py ssb 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/ssb 5 $out/duckdb-ssb.json > $out/duckdb-ssb.log 2>&1
echo "ssb duckdb rc=$? at $(el) s"
cd $out && tar czf $OUT/t15.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
  try:
    duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
    gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")[0]))["queries"]}
  except Exception as e:
    print(suite, "missing", e); continue
  r = []
  for q, d in duck.items():
    g = gpu[q]; r.append(d["ms"] / g["gpu_ms"])
    print(f"  {q:<5}{d['ms']:8.1f}{g['gpu_ms']:8.1f}{g['cpu_ms']:9.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('check')}")
  print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x; slower {sum(1 for x in r if x < 1)}; totals GPU {sum(g['gpu_ms'] for g in gpu.values()):.0f} / DuckDB {sum(d['ms'] for d in duck.values()):.0f} / CPU {sum(g['cpu_ms'] for g in gpu.values()):.0f} ms")
PY
