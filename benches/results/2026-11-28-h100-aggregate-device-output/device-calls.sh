# ===== call1/t27.sh
#!/usr/bin/env bash
# Session 10 call 1: GPU parents read GPU aggregates' output on the device. The aggregate tests,
# then TPC-H SF10 over GpuCachedTable beside DuckDB 2.0.1 (same call, same Parquet, same texts).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o27; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 170 $lib --test-threads 2 aggregate:: > $out/tests-aggregate.log 2>&1; echo "aggregate tests rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests-aggregate.log | head -10
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout $(( 520 - $(el) )) $cli bench tpch --sf 10 --iterations 5 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/tpch-cached-table.log 2>&1
echo "tpch cached table rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-cached-table.log) $(grep -h 'results:' $out/tpch-cached-table.log)"
left=$(( 590 - $(el) ))
timeout $left python3 .device/duck.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 5 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "tpch duckdb rc=$? at $(el) s"
cd $out && tar czf $OUT/t27.tar.gz .
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached-table.json")[0]))["queries"]}
    except Exception as e:
        print(suite, "missing", e); continue
    r = []
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x floor {g.get('floor_ms') or 0:7.3f} {g.get('ok')}")
    print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
# ===== call2/command.sh
#!/usr/bin/env bash
# Session 10 call 2 (792c27a's binary, on call 1's machine with its SF10 data): debug timelines and
# EXPLAIN ANALYZE of TPC-H q2, q11, q17, q20 over GpuCachedTable.
mkdir -p /tmp/b && xz -dc .device/res.tar.xz | tar xf - -C /tmp/b ./datafusion-gpu 2>/dev/null
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
RUST_LOG=datafusion_gpu::timeline=debug timeout 200 /tmp/b/datafusion-gpu bench tpch --sf 10 --iterations 2 \
  --queries 2,11,17,20 --data /tmp/dfg-data --residency cached --explain --no-save > $OUT/t28.log 2>&1
# ===== call3/t29.sh
#!/usr/bin/env bash
# Session 10 call 3: does the GPU path run faster with fewer, larger partitions? TPC-H and SSB
# SF10 through the CLI (tables from Parquet, cached with gpu_cache), target_partitions 16, 8, 4:
# each query 4 times, the median of the last 3 "Elapsed" per query.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o29; rm -rf $out; mkdir -p $out /tmp/b
[ -x /tmp/b/datafusion-gpu ] || { xz -dc .device/res.tar.xz | tar xf - -C /tmp/b ./datafusion-gpu; chmod +x /tmp/b/*; }
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
[ -f /tmp/dfg-data/ssb-sf10/lineorder.parquet ] || timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
python3 - $out $cli <<'PY'
import subprocess, sys, re, statistics, os, time
out, cli = sys.argv[1], sys.argv[2]
qdir = "crates/datafusion-gpu-bench/tpch/queries"
suites = {"tpch": (["nation","region","supplier","customer","part","partsupp","orders","lineitem"], [f"q{i}" for i in range(1,23)]),
          "ssb": (["date","customer","supplier","part","lineorder"], ["q1.1","q1.2","q1.3","q2.1","q2.2","q2.3","q3.1","q3.2","q3.3","q3.4","q4.1","q4.2","q4.3"])}
res = {}
for suite, (tables, qs) in suites.items():
    for p in [16, 8, 4]:
        stmts = [f"SET datafusion.execution.target_partitions = {p};"]
        for t in tables:
            stmts.append(f"CREATE EXTERNAL TABLE \"{t}\" STORED AS PARQUET LOCATION '/tmp/dfg-data/{suite}-sf10/{t}.parquet';")
            stmts.append(f"SELECT * FROM gpu_cache('{t}');")
        for q in qs:
            sql = "\n".join(l for l in open(f"{qdir}/{suite}/{q}.sql").read().splitlines() if not l.strip().startswith("--")).strip()
            stmts += [sql] * 4
        path = f"{out}/{suite}-p{p}.sql"; open(path, "w").write("\n".join(stmts) + "\n")
        t = time.time()
        r = subprocess.run([cli, "--maxrows", "1", "-f", path], capture_output=True, text=True, timeout=150)
        open(f"{out}/{suite}-p{p}.log", "w").write(r.stdout + r.stderr)
        el = [float(x) * 1e3 for x in re.findall(r"Elapsed ([0-9.]+) seconds", r.stdout)]
        head = 1 + 2 * len(tables)
        if len(el) != head + 4 * len(qs):
            print(suite, p, "statements", len(el), "expected", head + 4 * len(qs), "rc", r.returncode, r.stderr[-500:]); continue
        el = el[head:]
        res[(suite, p)] = {q: statistics.median(el[4*i+1:4*i+4]) for i, q in enumerate(qs)}
        print(f"{suite} p{p}: {time.time()-t:.0f} s, total {sum(res[(suite,p)].values()):.0f} ms", flush=True)
for suite, (tables, qs) in suites.items():
    print(f"\n{suite}: ms at target_partitions 16 / 8 / 4")
    for q in qs:
        print(f"  {q:<6}" + "".join(f"{res.get((suite,p),{}).get(q,float('nan')):8.0f}" for p in [16,8,4]))
    print("  total " + "".join(f"{sum(res.get((suite,p),{}).values()):8.0f}" for p in [16,8,4]))
PY
echo "done at $(el) s"
cd $out && tar czf $OUT/t29.tar.gz .
# ===== call4/cli_partitions.py
import subprocess, sys, re, statistics, os, time
out, cli = sys.argv[1], sys.argv[2]
qdir = "crates/datafusion-gpu-bench/tpch/queries"
suites = {"tpch": (["nation","region","supplier","customer","part","partsupp","orders","lineitem"], [f"q{i}" for i in range(1,23)]),
          "ssb": (["date","customer","supplier","part","lineorder"], ["q1.1","q1.2","q1.3","q2.1","q2.2","q2.3","q3.1","q3.2","q3.3","q3.4","q4.1","q4.2","q4.3"])}
res = {}
want = os.environ.get("SUITES", "tpch,ssb").split(",")
for suite, (tables, qs) in suites.items():
    if suite not in want: continue
    for p in [16, 8, 4]:
        stmts = [f"SET datafusion.execution.target_partitions = {p};"]
        for t in tables:
            stmts.append(f"CREATE EXTERNAL TABLE \"{t}\" STORED AS PARQUET LOCATION '/tmp/dfg-data/{suite}-sf10/{t}.parquet';")
            stmts.append(f"SELECT * FROM gpu_cache('{t}');")
        for q in qs:
            sql = "\n".join(l for l in open(f"{qdir}/{suite}/{q}.sql").read().splitlines() if not l.strip().startswith("--")).strip()
            stmts += [sql] * 4
        path = f"{out}/{suite}-p{p}.sql"; open(path, "w").write("\n".join(stmts) + "\n")
        t = time.time()
        r = subprocess.run([cli, "--maxrows", "1", "-f", path], capture_output=True, text=True, timeout=150)
        open(f"{out}/{suite}-p{p}.log", "w").write(r.stdout + r.stderr)
        el = [float(x) * 1e3 for x in re.findall(r"Elapsed ([0-9.]+) seconds", r.stdout)]
        head = 1 + 2 * len(tables)
        if len(el) != head + 4 * len(qs):
            print(suite, p, "statements", len(el), "expected", head + 4 * len(qs), "rc", r.returncode, r.stderr[-500:]); continue
        el = el[head:]
        res[(suite, p)] = {q: statistics.median(el[4*i+1:4*i+4]) for i, q in enumerate(qs)}
        print(f"{suite} p{p}: {time.time()-t:.0f} s, total {sum(res[(suite,p)].values()):.0f} ms", flush=True)
for suite, (tables, qs) in suites.items():
    if suite not in want: continue
    print(f"\n{suite}: ms at target_partitions 16 / 8 / 4")
    for q in qs:
        print(f"  {q:<6}" + "".join(f"{res.get((suite,p),{}).get(q,float('nan')):8.0f}" for p in [16,8,4]))
    print("  total " + "".join(f"{sum(res.get((suite,p),{}).values()):8.0f}" for p in [16,8,4]))
# ===== call4/t30.sh
#!/usr/bin/env bash
# Session 10 call 4 (792c27a + 3ef25f4): the GPU suite; SF1 TPC-H and SSB over GpuCachedTable with
# every operator on the GPU, every answer checked; SSB SF10 through the CLI (gpu_cache of Parquet)
# at target_partitions 16, 8, 4 (call 3 ran it before gpu_cache kept the target partitions).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o30; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 330 $lib --test-threads 2 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout 80 $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
done
left=$(( 585 - $(el) ))
timeout 60 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb sf10 data at $(el) s"
left=$(( 590 - $(el) ))
[ $left -gt 60 ] && SUITES=ssb timeout $left python3 .device/cli_partitions.py $out $cli
echo "done at $(el) s"
cd $out && tar czf $OUT/t30.tar.gz .
# ===== call5/t31.sh
#!/usr/bin/env bash
# Session 10 call 5 (792c27a + 3ef25f4): SF10 TPC-H and SSB over GpuCachedTable (--residency cached)
# beside DuckDB 2.0.1 in the same call (same Parquet, same query texts), each query against its floor;
# then, with the time left, the rule's debug log for TPC-H q20.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o31; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
echo "(the GPU suite ran in call 4)"
for suite in tpch ssb; do
  iters=$([ $suite = tpch ] && echo 5 || echo 3)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  left=$(( 560 - $(el) )); [ $left -lt 150 ] && { echo "no time for $suite"; continue; }
  timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout $(( 540 - $(el) )) $cli bench $suite --sf 10 --iterations $iters --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 590 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t31.tar.gz .
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached-table.json")[0]))["queries"]}
    except Exception as e:
        print(suite, "missing", e); continue
    r = []
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x floor {g.get('floor_ms') or 0:7.3f} {g.get('ok')}")
    print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
# Why TPC-H q20's semi join over the grouped lineitem sums stays Partitioned: the rule's debug log.
left=$(( 597 - $(el) )); [ $left -gt 25 ] && RUST_LOG=datafusion_gpu=debug timeout $left $cli bench tpch --sf 10 --iterations 1 --queries 20 --data /tmp/dfg-data --residency cached --explain --no-save > /tmp/q20-debug.log 2>&1
grep -v "timeline" /tmp/q20-debug.log | gzip > $OUT/q20-debug.log.gz
# ===== call6/ab_cli.py
# Same-machine A/B of two CLI binaries over SF10 tables held in memory (CREATE TABLE AS from the
# runner's Parquet, 16 partitions) and cached with gpu_cache: each query 4 times per process, the
# median of the last 3 "Elapsed"; binaries in turn, two rounds. Usage: ab_cli.py OUT OLD NEW
import subprocess, sys, re, statistics, time, os
out, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
qdir = "crates/datafusion-gpu-bench/tpch/queries"
suites = {"tpch": (["nation","region","supplier","customer","part","partsupp","orders","lineitem"], [f"q{i}" for i in range(1,23)]),
          "ssb": (["date","customer","supplier","part","lineorder"], ["q1.1","q1.2","q1.3","q2.1","q2.2","q2.3","q3.1","q3.2","q3.3","q3.4","q4.1","q4.2","q4.3"])}
res = {}
want = os.environ.get("SUITES", "ssb,tpch").split(",")
suites = {k: suites[k] for k in want}
for suite, (tables, qs) in suites.items():
    stmts = ["SET datafusion.execution.target_partitions = 16;"]
    for t in tables:
        stmts.append(f"CREATE EXTERNAL TABLE \"{t}_file\" STORED AS PARQUET LOCATION '/tmp/dfg-data/{suite}-sf10/{t}.parquet';")
        stmts.append(f"CREATE TABLE \"{t}\" AS SELECT * FROM \"{t}_file\";")
        stmts.append(f"SELECT * FROM gpu_cache('{t}');")
    for q in qs:
        sql = "\n".join(l for l in open(f"{qdir}/{suite}/{q}.sql").read().splitlines() if not l.strip().startswith("--")).strip()
        stmts += [sql] * 4
    path = f"{out}/{suite}.sql"; open(path, "w").write("\n".join(stmts) + "\n")
    head = 1 + 3 * len(tables)
    for rnd in [1, 2]:
        for name, cli in [("old", old), ("new", new)]:
            t = time.time()
            r = subprocess.run([cli, "--maxrows", "1", "-f", path], capture_output=True, text=True, timeout=200)
            open(f"{out}/{suite}-{name}-{rnd}.log", "w").write(r.stdout + r.stderr)
            el = [float(x) * 1e3 for x in re.findall(r"Elapsed ([0-9.]+) seconds", r.stdout)]
            if len(el) != head + 4 * len(qs):
                print(suite, name, rnd, "statements", len(el), "expected", head + 4 * len(qs), r.stderr[-300:], flush=True); continue
            el = el[head:]
            res[(suite, name, rnd)] = {q: statistics.median(el[4*i+1:4*i+4]) for i, q in enumerate(qs)}
            print(f"{suite} {name} round {rnd}: {time.time()-t:.0f} s, total {sum(res[(suite,name,rnd)].values()):.0f} ms", flush=True)
for suite, (tables, qs) in suites.items():
    print(f"\n{suite} SF10, ms: old round 1 / new round 1 / old round 2 / new round 2")
    for q in qs:
        print(f"  {q:<6}" + "".join(f"{res.get((suite,n,r),{}).get(q,float('nan')):8.1f}" for r in [1,2] for n in ["old","new"]))
    print("  total " + "".join(f"{sum(res.get((suite,n,r),{}).values()):8.0f}" for r in [1,2] for n in ["old","new"]))
# ===== call6/t32.sh
#!/usr/bin/env bash
# Session 10 call 6: same-machine A/B through the CLI, b5c78a8 (datafusion-gpu-old) against
# 3ef25f4 (datafusion-gpu: GPU aggregates hand their output over on the device), SSB then TPC-H SF10.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o32; rm -rf $out; mkdir -p $out /tmp/ab
xz -dc .device/res.tar.xz | tar xf - -C /tmp/ab; chmod +x /tmp/ab/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
cli=/tmp/ab/datafusion-gpu
timeout 80 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
SUITES=ssb timeout $(( 400 - $(el) )) python3 .device/ab_cli.py $out /tmp/ab/datafusion-gpu-old $cli
echo "ssb a/b done at $(el) s"
left=$(( 420 - $(el) ))
if [ $left -gt 200 ]; then
  timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
  echo "tpch data at $(el) s"
  SUITES=tpch timeout $(( 430 - $(el) )) python3 .device/ab_cli.py $out /tmp/ab/datafusion-gpu-old $cli
fi
echo "done at $(el) s"
cd $out && tar czf $OUT/t32.tar.gz .
