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
# ===== t5.sh
#!/usr/bin/env bash
# Resident tables (issue 46, first step): the library tests (join differential tests aside), then
# TPC-H and SSB SF10 with the GPU session's tables pageable and resident in device memory, one
# after the other on this machine, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o5; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "unpacked at $(el) s"
timeout 150 $lib --test-threads 4 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" | tee $out/lib.rc
grep -E "resident|^test result|FAILED|panicked" $out/tests-lib.log | head -20
grep -h "ns of uploads" $out/tests-lib.log | sort | uniq | head -40 > $out/uploads.txt
for suite in tpch ssb; do
  it=$([ $suite = tpch ] && echo 2 || echo 1)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  for r in pageable gpu; do
    left=$(( 590 - $(el) )); [ $left -lt 30 ] && { echo "no time left for $suite $r"; continue; }
    timeout $left $cli bench $suite --sf 10 --iterations $it --data /tmp/dfg-data --residency $r \
      --out $out/records --label $r > $out/$suite-$r.log 2>&1
    echo "$suite $r rc=$? at $(el) s: $(grep -h 'host memory' $out/$suite-$r.log | head -1) $(grep -h 'total:' $out/$suite-$r.log) $(grep -h 'results:' $out/$suite-$r.log)"
  done
done
cd $out && tar czf $OUT/t5.tar.gz . ; cd - >/dev/null
for suite in tpch ssb; do
  echo "$suite GPU ms per query: pageable, gpu-resident"
  for q in $(grep -hoE '^q[0-9.]+ ' $out/$suite-pageable.log); do
    printf '%-6s' $q; for r in pageable gpu; do printf ' %8s' "$(grep -E "^$q " $out/$suite-$r.log | awk '{print $3}')"; done; echo
  done
done
# ===== t6.sh
#!/usr/bin/env bash
# Resident tables against DuckDB on one machine: the resident-table GPU tests, then per suite
# (TPC-H, SSB at SF10) the runner with the GPU session's tables GPU-resident, DuckDB 2.0.1 on the
# same Parquet and query texts, and the runner with pageable tables; every runner answer checked
# against DataFusion, DuckDB's row counts compared with DataFusion's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o6; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt; lscpu | grep "Model name" | tee -a $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 120 $lib --test-threads 2 resident > $out/tests-resident.log 2>&1; echo "resident tests rc=$? at $(el) s" | tee $out/tests.rc
grep -E "^test |^test result" $out/tests-resident.log
for suite in tpch ssb; do
  it=$([ $suite = tpch ] && echo 2 || echo 1)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 150 $cli bench $suite --sf 10 --iterations $it --data /tmp/dfg-data --residency gpu --out $out/records --label gpu > $out/$suite-gpu.log 2>&1
  echo "$suite gpu rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu.log) $(grep -h 'results:' $out/$suite-gpu.log)"
  timeout 120 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
for suite in tpch ssb; do
  it=$([ $suite = tpch ] && echo 2 || echo 1)
  left=$(( 585 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite pageable"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations $it --data /tmp/dfg-data --residency pageable --out $out/records --label pageable > $out/$suite-pageable.log 2>&1
  echo "$suite pageable rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-pageable.log) $(grep -h 'results:' $out/$suite-pageable.log)"
done
cd $out && tar czf $OUT/t6.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
    runs = {}
    for label in ["gpu", "pageable"]:
        f = glob.glob(f"{out}/records/*-{suite}-sf10-{label}.json")
        if f: runs[label] = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    print(f"{suite}: query, DuckDB ms, GPU-resident ms, pageable ms, DataFusion CPU ms, rows DF/DuckDB")
    ratios = {k: [] for k in runs}
    for q, d in duck.items():
        g = runs.get("gpu", {}).get(q, {}); p = runs.get("pageable", {}).get(q, {})
        cells = [f"{d.get('ms', float('nan')):8.1f}"] + [f"{r.get('gpu_ms') or float('nan'):8.1f}" for r in (g, p)] + [f"{g.get('cpu_ms') or float('nan'):8.1f}"]
        print(f"  {q:<6}" + " ".join(cells) + f"  {g.get('rows')}/{d.get('rows')}{'' if g.get('rows') == d.get('rows') else '  ROWS DIFFER'}")
        for k, r in runs.items():
            if r.get(q, {}).get("gpu_ms") and d.get("ms"): ratios[k].append(d["ms"] / r[q]["gpu_ms"])
    for k, v in ratios.items():
        if v: print(f"  {k}: geomean speedup over DuckDB {math.exp(sum(map(math.log, v)) / len(v)):.2f}x over {len(v)} queries; slower than DuckDB: {sum(1 for x in v if x < 1)}")
PY
