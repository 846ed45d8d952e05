# ===== call1/t33.sh
#!/usr/bin/env bash
# Session 11 call 1: where a short query's host time goes. SF10 SSB and TPC-H over GpuCachedTable:
# sampling profiles (bench --profile) of short queries; then the CLI's GPU-only timings under
# the driver's host wait modes (DFG_CUDA_SYNC=auto|blocking|yield).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o33; rm -rf $out; mkdir -p $out/prof /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc; echo "ready at $(el) s"
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
timeout 120 $cli bench ssb --sf 10 --iterations 1 --queries 1.1,2.1,3.4,4.3 --data /tmp/dfg-data --residency cached --profile $out/prof --profile-runs 30 --no-save > $out/ssb-profile.log 2>&1
echo "ssb profile rc=$? at $(el) s"; grep -E "^q[0-9.]+ |samples" $out/ssb-profile.log
timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
timeout 120 $cli bench tpch --sf 10 --iterations 1 --queries 1,2,11,17 --data /tmp/dfg-data --residency cached --profile $out/prof --profile-runs 10 --no-save > $out/tpch-profile.log 2>&1
echo "tpch profile rc=$? at $(el) s"; grep -E "^q[0-9.]+ |samples" $out/tpch-profile.log
left=$(( 585 - $(el) ))
[ $left -gt 90 ] && BUDGET_S=$left timeout $left python3 .device/variants.py $out $cli auto= blocking=DFG_CUDA_SYNC=blocking yield=DFG_CUDA_SYNC=yield auto2=
echo "done at $(el) s"
cd $out && tar czf $OUT/t33.tar.gz --exclude='*.sql' .
# ===== call1/variants.py
# GPU-only timings of one CLI binary under several environments (e.g. DFG_CUDA_SYNC), in turn:
# SF10 tables held in memory (CREATE TABLE AS from the runner's Parquet, 16 partitions) and
# cached with gpu_cache; each query 4 times per process, the median of the last 3 "Elapsed".
# Usage: variants.py OUT CLI NAME=VAR=VALUE[,VAR=VALUE] ...   (NAME= alone: the environment as is)
import subprocess, sys, re, statistics, time, os
out, cli, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
qdir = "crates/datafusion-gpu-bench/tpch/queries"
suites = {"tpch": (["nation","region","supplier","customer","part","partsupp","orders","lineitem"], [f"q{i}" for i in range(1,23)]),
          "ssb": (["date","customer","supplier","part","lineorder"], ["q1.1","q1.2","q1.3","q2.1","q2.2","q2.3","q3.1","q3.2","q3.3","q3.4","q4.1","q4.2","q4.3"])}
want = os.environ.get("SUITES", "ssb,tpch").split(",")
deadline = time.time() + float(os.environ.get("BUDGET_S", "1e9"))
suites = {k: suites[k] for k in want}
variants = []
for s in specs:
    name, _, env = s.partition("=")
    extra = dict(kv.split("=", 1) for kv in env.split(",") if kv)
    variants.append((name, extra))
res = {}
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
    for i, (name, extra) in enumerate(variants):
        if time.time() > deadline - 60:
            print(suite, name, "skipped: no time left", flush=True); continue
        t = time.time()
        env = dict(os.environ, **extra)
        try:
            r = subprocess.run([cli, "--maxrows", "1", "-f", path], capture_output=True, text=True, timeout=max(30, min(200, deadline - time.time())), env=env)
        except subprocess.TimeoutExpired:
            print(suite, name, "timed out", flush=True); continue
        open(f"{out}/{suite}-{i}-{name}.log", "w").write(r.stdout + r.stderr)
        el = [float(x) * 1e3 for x in re.findall(r"Elapsed ([0-9.]+) seconds", r.stdout)]
        if len(el) != head + 4 * len(qs):
            print(suite, name, "statements", len(el), "expected", head + 4 * len(qs), r.stderr[-300:], flush=True); continue
        el = el[head:]
        res[(suite, i)] = {q: statistics.median(el[4*j+1:4*j+4]) for j, q in enumerate(qs)}
        print(f"{suite} {name}: {time.time()-t:.0f} s, total {sum(res[(suite,i)].values()):.0f} ms", flush=True)
for suite, (tables, qs) in suites.items():
    print(f"\n{suite} SF10, ms: " + " / ".join(n for n, _ in variants))
    for q in qs:
        print(f"  {q:<6}" + "".join(f"{res.get((suite,i),{}).get(q,float('nan')):9.1f}" for i in range(len(variants))))
    print("  total " + "".join(f"{sum(res.get((suite,i),{}).values()):9.0f}" for i in range(len(variants))))
# ===== call2/ab_cli.py
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
# ===== call2/ncu_runs.py
# Kernel time of a query on the device, by ncu (gpu__time_duration of every kernel): the CLI
# loads a suite's SF10 tables (CREATE TABLE AS from the runner's Parquet, gpu_cache) and runs the
# query 0 or RUNS times; per run = (with runs - without) / RUNS. Usage: ncu_runs.py OUT CLI SUITE QUERY RUNS
import subprocess, sys, csv, io, collections, os
out, cli, suite, q, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
tables = {"tpch": ["nation","region","supplier","customer","part","partsupp","orders","lineitem"],
          "ssb": ["date","customer","supplier","part","lineorder"]}[suite]
sql = "\n".join(l for l in open(f"crates/datafusion-gpu-bench/tpch/queries/{suite}/{q}.sql").read().splitlines() if not l.strip().startswith("--")).strip()
res = {}
for n in [0, runs]:
    stmts = ["SET datafusion.execution.target_partitions = 16;"]
    for t in tables:
        stmts.append(f"CREATE EXTERNAL TABLE \"{t}_file\" STORED AS PARQUET LOCATION '/tmp/dfg-data/{suite}-sf10/{t}.parquet';")
        stmts.append(f"CREATE TABLE \"{t}\" AS SELECT * FROM \"{t}_file\";")
        stmts.append(f"SELECT * FROM gpu_cache('{t}');")
    stmts += [sql] * (n + 1)  # one warm-up run (fills the cache), then n
    path = f"{out}/ncu-{suite}-{q}-{n}.sql"; open(path, "w").write("\n".join(stmts) + "\n")
    log = f"{out}/ncu-{suite}-{q}-{n}.csv"
    r = subprocess.run(["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--log-file", log,
                        cli, "--maxrows", "1", "-f", path], capture_output=True, text=True, timeout=240)
    open(f"{out}/ncu-{suite}-{q}-{n}.out", "w").write(r.stdout[-20000:] + r.stderr[-5000:])
    text = open(log).read() if os.path.exists(log) else ""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:])))) if start is not None else []
    per = collections.defaultdict(lambda: [0, 0.0])
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum": continue
        v = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        ns = v * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1)
        name = row["Kernel Name"].split("(")[0]
        per[name][0] += 1; per[name][1] += ns
    res[n] = per
    print(f"{suite} {q} with {n} timed runs: {sum(c for c, _ in per.values())} kernels, {sum(t for _, t in per.values())/1e6:.3f} ms of kernel time", flush=True)
names = set(res[0]) | set(res[runs])
rows = sorted(((res[runs].get(k, [0, 0])[0] - res[0].get(k, [0, 0])[0]) / runs, (res[runs].get(k, [0, 0])[1] - res[0].get(k, [0, 0])[1]) / runs / 1e6, k) for k in names)
print(f"{suite} {q} per run: {sum(r[0] for r in rows):.0f} kernels, {sum(r[1] for r in rows):.3f} ms kernel time; by kernel (launches, ms):")
for c, ms, k in sorted(rows, key=lambda r: -r[1])[:25]:
    print(f"  {c:7.1f} {ms:8.3f}  {k}")
# ===== call2/t34.sh
#!/usr/bin/env bash
# Session 11 call 2: the cached scan's layouts kept per table (A/B against the binary before, same
# machine, CLI, GPU only); kernel time per query by ncu; debug timelines of short queries.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o34; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; old=/tmp/b/datafusion-gpu-old
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data at $(el) s"
timeout 200 python3 .device/ab_cli.py $out $old $cli 2>&1 | tail -45
echo "A/B done at $(el) s"
for sq in "ssb q1.1" "tpch q2"; do
  left=$(( 540 - $(el) )); [ $left -lt 40 ] && break
  timeout $left python3 .device/ncu_runs.py $out $cli $sq 3 2>&1 | tail -22
done
echo "ncu done at $(el) s"
left=$(( 590 - $(el) ))
[ $left -gt 25 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --queries 1.1,3.4 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
echo "done at $(el) s"
cd $out && tar czf $OUT/t34.tar.gz --exclude='*.sql' .
# ===== call3/t35.sh
#!/usr/bin/env bash
# Session 11 call 3: the GPU suite on this session's library (cached scan layouts), then SF1 TPC-H
# and SSB over GpuCachedTable with every operator on the GPU, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o35; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 400 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 585 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $(( 590 - $(el) )) $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
done
gzip $out/*.log
cd $out && tar czf $OUT/t35.tar.gz .
# ===== call4/t36.sh
#!/usr/bin/env bash
# Session 11 call 4: SF10 TPC-H and SSB over GpuCachedTable (cached scan layouts kept per table)
# beside DuckDB 2.0.1 in the same call (same Parquet, same query texts, 16 threads).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o36; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device2/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
for suite in ssb tpch; do
  iters=3
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  left=$(( 560 - $(el) )); [ $left -lt 150 ] && { echo "no time for $suite"; continue; }
  [ -d /tmp/dfg-data/$suite-sf10 ] || timeout 130 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout $(( 480 - $(el) )) $cli bench $suite --sf 10 --iterations $iters --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 590 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-table.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -4
done
cd $out && tar czf $OUT/t36.tar.gz .
# ===== call5/t37.sh
#!/usr/bin/env bash
# Session 11 call 5: where TPC-H q2 and q11 (the two queries still slower than DuckDB) spend their
# time: debug timelines and EXPLAIN ANALYZE at SF10 over GpuCachedTable (b8d6452's code).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o37; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device2/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench tpch --sf 10 --iterations 2 --queries 2,11 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"; grep -E "^q[0-9]+ " $out/tpch-timeline.log
gzip $out/tpch-timeline.log
cd $out && tar czf $OUT/t37.tar.gz .
# ===== call6/t38.sh
#!/usr/bin/env bash
# Session 11 call 6: the GPU suite on the final library (7385108: cached scan layouts' batch size in one place).
set -uo pipefail
mkdir -p /tmp/b && xz -dc .device3/lib.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 300 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 3 > $OUT/tests.log 2>&1; echo "GPU suite rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/tests.log | head -10
