# ===== call1/settings.py
# GPU-only timings of CLI binaries under several sets of SET statements, in turn: SF10 tables held
# in memory (CREATE TABLE AS from the runner's Parquet, in the variant's target partitions) and
# cached with gpu_cache; each query 4 times per process, the median of the last 3 "Elapsed".
# Usage: settings.py OUT NAME=CLI[:SET k=v;SET k=v...] ...   (variants run in turn, ROUNDS rounds)
import subprocess, sys, re, statistics, time, os
out, specs = sys.argv[1], sys.argv[2:]
qdir = "crates/datafusion-gpu-bench/tpch/queries"
suites = {"tpch": (["nation","region","supplier","customer","part","partsupp","orders","lineitem"], [f"q{i}" for i in range(1,23)]),
          "ssb": (["date","customer","supplier","part","lineorder"], ["q1.1","q1.2","q1.3","q2.1","q2.2","q2.3","q3.1","q3.2","q3.3","q3.4","q4.1","q4.2","q4.3"])}
want = os.environ.get("SUITES", "ssb,tpch").split(",")
rounds = int(os.environ.get("ROUNDS", "1"))
deadline = time.time() + float(os.environ.get("BUDGET_S", "1e9"))
suites = {k: suites[k] for k in want}
variants = []
for s in specs:
    name, _, rest = s.partition("=")
    cli, _, sets = rest.partition(":")
    variants.append((name, cli, [x.strip() + ";" for x in sets.split(";") if x.strip()]))
res = {}
for suite, (tables, qs) in suites.items():
    for rnd in range(1, rounds + 1):
        for i, (name, cli, sets) in enumerate(variants):
            if time.time() > deadline - 45:
                print(suite, name, rnd, "skipped: no time left", flush=True); continue
            stmts = ["SET datafusion.execution.target_partitions = 16;"] + sets
            for t in tables:
                stmts.append(f"CREATE EXTERNAL TABLE \"{t}_file\" STORED AS PARQUET LOCATION '/tmp/dfg-data/{suite}-sf10/{t}.parquet';")
                stmts.append(f"CREATE TABLE \"{t}\" AS SELECT * FROM \"{t}_file\";")
                stmts.append(f"SELECT * FROM gpu_cache('{t}');")
            for q in qs:
                sql = "\n".join(l for l in open(f"{qdir}/{suite}/{q}.sql").read().splitlines() if not l.strip().startswith("--")).strip()
                stmts += [sql] * 4
            path = f"{out}/{suite}-{i}.sql"; open(path, "w").write("\n".join(stmts) + "\n")
            head = 1 + len(sets) + 3 * len(tables)
            t = time.time()
            try:
                r = subprocess.run([cli, "--maxrows", "1", "-f", path], capture_output=True, text=True, timeout=max(30, min(200, deadline - time.time())))
            except subprocess.TimeoutExpired:
                print(suite, name, rnd, "timed out", flush=True); continue
            open(f"{out}/{suite}-{i}-{name}-{rnd}.log", "w").write(r.stdout + r.stderr)
            el = [float(x) * 1e3 for x in re.findall(r"Elapsed ([0-9.]+) seconds", r.stdout)]
            if len(el) != head + 4 * len(qs):
                print(suite, name, rnd, "statements", len(el), "expected", head + 4 * len(qs), r.stderr[-300:], flush=True); continue
            el = el[head:]
            res[(suite, i, rnd)] = {q: statistics.median(el[4*j+1:4*j+4]) for j, q in enumerate(qs)}
            print(f"{suite} {name} round {rnd}: {time.time()-t:.0f} s, total {sum(res[(suite,i,rnd)].values()):.0f} ms", flush=True)
cols = [(i, r) for r in range(1, rounds + 1) for i in range(len(variants))]
for suite, (tables, qs) in suites.items():
    print(f"\n{suite} SF10, ms: " + " / ".join(f"{variants[i][0]} r{r}" for i, r in cols))
    for q in qs:
        print(f"  {q:<6}" + "".join(f"{res.get((suite,i,r),{}).get(q,float('nan')):9.1f}" for i, r in cols))
    print("  total " + "".join(f"{sum(res.get((suite,i,r),{}).values()):9.0f}" for i, r in cols))
# ===== call1/t60.sh
#!/usr/bin/env bash
# Session 15 call 1: the GPU suite on the resident-inputs placement (joins, aggregates and HAVING
# filters over device inputs on the GPU whatever min_rows and the estimate say; Finals over GPU
# partials; aggregates over keys a filter makes constant; per-batch upload cost of host sides
# only), SF10 TPC-H and SSB over GpuCachedTable with the defaults and EXPLAIN (where every
# operator ran), and an A/B of gpu.cost.resident_inputs.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o60; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 120 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1;
  timeout 120 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1 ) &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait; echo "data at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 500 - $(el) )); [ $left -lt 50 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 3 --cpu-iterations 1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/$suite-sf10-explain.log 2>&1
  echo "$suite SF10 cached, defaults: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf10-explain.log) $(grep -h 'results:' $out/$suite-sf10-explain.log)"
  grep -E "^q[0-9.]+ +[0-9]" $out/$suite-sf10-explain.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}'
  grep -E "stays on the CPU|on the CPU:" $out/$suite-sf10-explain.log | sort | uniq -c | cut -c1-220 | head -12
done
left=$(( 585 - $(el) ))
[ $left -gt 40 ] && SUITES=ssb,tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out new=$cli "nores=$cli:SET gpu.cost.resident_inputs = false" 2>&1 | tail -42
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t60.tar.gz --exclude='*.sql' .
# ===== call2/t62.sh
#!/usr/bin/env bash
# Session 15 call 2: the GPU suite on the final rule (resident inputs, repartitions of device
# inputs read around, round-robin probes of one-partition regions on the device), SF1 answers over
# GpuCachedTable with the defaults, and SF10 EXPLAIN of the queries whose plans changed.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o62; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 120 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1;
  timeout 60 $cli bench tpch --sf 1 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-sf1-tpch.log 2>&1;
  timeout 60 $cli bench ssb --sf 1 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-sf1-ssb.log 2>&1 ) &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait; echo "data at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 470 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/$suite-sf1-cached.log 2>&1
  echo "$suite SF1 cached, defaults: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-cached.log)"
  grep -E "^q[0-9.]+ +[0-9]" $out/$suite-sf1-cached.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}' | grep -v "aggs [0-9]/[0-9] GPU" | head
  grep -E "^ +CpuFallbackExec|^ +FilterExec" $out/$suite-sf1-cached.log | cut -c1-160 | sort | uniq -c | head
done
left=$(( 585 - $(el) ))
[ $left -gt 40 ] && timeout $left $cli bench tpch --sf 10 --iterations 3 --cpu-iterations 1 --queries 8,11,17,20,22 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-sf10-explain.log 2>&1
grep -E "^q[0-9.]+ +[0-9]" $out/tpch-sf10-explain.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}'
grep -E "^ +CpuFallbackExec|^ +FilterExec" $out/tpch-sf10-explain.log | cut -c1-160 | sort | uniq -c | head
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t62.tar.gz .
# ===== call3/t61.sh
#!/usr/bin/env bash
# Session 15 call 2: SF10 SSB and TPC-H over GpuCachedTable (the defaults) with 10 timed GPU runs a
# query (one timed CPU run; every answer checked against DataFusion's) and EXPLAIN, DuckDB 2.0.1
# beside it in the same call (same Parquet, same query texts, 16 threads, 10 timed runs after a
# warm-up); then SF1 answers with the cache on (defaults).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o61; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
for suite in ssb tpch; do
  left=$(( 480 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 1 --data /tmp/dfg-data --residency cached --out $out/records --label cached-10 > $out/$suite-cached-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
  grep -E "stays on the CPU|on the CPU:" $out/$suite-cached-10.log | sort | uniq -c | cut -c1-200 | head -8
  left=$(( 500 - $(el) ))
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
done
for suite in tpch ssb; do
  left=$(( 540 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 40 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  left=$(( 545 - $(el) ))
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/$suite-sf1-cached.log 2>&1
  echo "$suite SF1 cached, defaults: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-cached.log)"
  grep -E "^q[0-9.]+ +[0-9]" $out/$suite-sf1-cached.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}' | grep -v "aggs [0-9]/[0-9] GPU" | head
  grep -E "^ +CpuFallbackExec|^ +FilterExec" $out/$suite-sf1-cached.log | cut -c1-160 | sort | uniq -c | head
done
left=$(( 595 - $(el) ))
[ $left -gt 20 ] && timeout $left $cli bench tpch --sf 10 --iterations 1 --cpu-iterations 0 --queries 7,8,20 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-sf10-q7-explain.log 2>&1
grep -E "^q[0-9.]+ +[0-9]" $out/tpch-sf10-q7-explain.log | awk '{print $1, $3, $7, $8, $9, $10, $11, $12, $13}'
grep -cE "^ +CpuFallbackExec|^ +FilterExec" $out/tpch-sf10-q7-explain.log | sed 's/^/CPU filters and fallbacks in q7, q8, q20 at SF10: /'
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t61.tar.gz .
# ===== call4/t63.sh
#!/usr/bin/env bash
# Session 15 call 4: the GPU suite on the final code (the join-input fuse under dropped
# round-robin repartitions included).
set -uo pipefail
out=/tmp/o63; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/lib.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 400 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$?"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
gzip $out/*.log; cd $out && tar czf $OUT/t63.tar.gz .
# ===== call5/t64.sh
#!/usr/bin/env bash
# Session 15 call 5: where a pageable (uncached) SSB query's time goes, for the cold-path work:
# SSB SF10 over pageable in-memory tables (the runner's default residency), one timed run a query,
# and the debug timeline of q1.1 and q3.4.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o64; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1; echo "data at $(el) s"
timeout 150 $cli bench ssb --sf 10 --iterations 1 --cpu-iterations 0 --data /tmp/dfg-data --no-save > $out/ssb-pageable.log 2>&1
echo "pageable rc=$? at $(el) s"; grep -E "^q[0-9.]+ +[0-9]|total:|results:" $out/ssb-pageable.log | cut -c1-60
RUST_LOG=datafusion_gpu::timeline=debug timeout 90 $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 1.1,3.4 --data /tmp/dfg-data --explain --no-save > $out/ssb-pageable-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"
grep -E "upload|staged|chunk" $out/ssb-pageable-timeline.log | tail -12 | cut -c1-200
gzip $out/*.log; cd $out && tar czf $OUT/t64.tar.gz .
# ===== call6/t63.sh
#!/usr/bin/env bash
# Session 15 call 4 (and 6, after the review mend): the GPU suite on the final code (the join-input fuse under dropped
# round-robin repartitions included).
set -uo pipefail
out=/tmp/o63; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/lib.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 285 /tmp/b/datafusion_gpu-3e361ff91f61c412 --test-threads 4 > $out/tests.log 2>&1; echo "GPU suite rc=$?"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
gzip $out/*.log; cd $out && tar czf $OUT/t63.tar.gz .
