# ===== call1/t45.sh
#!/usr/bin/env bash
# Session 13 call 1: the GPU suite on the library with cached regions run as one partition
# (gpu.table_cache.one_partition), SF1 TPC-H and SSB over GpuCachedTable with every operator on
# the GPU and every answer checked, then SF10 SSB in the CLI with the option on and off (same binary).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o45; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device5/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 560 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  grep -c "read as one" $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite scan lines read as one: /"
done
left=$(( 585 - $(el) ))
if [ $left -gt 120 ]; then
  timeout 70 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
  left=$(( 585 - $(el) ))
  SUITES=ssb ROUNDS=1 BUDGET_S=$left timeout $left python3 .device5/settings.py $out one=$cli "parts=$cli:SET gpu.table_cache.one_partition = false" 2>&1 | tail -18
fi
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t45.tar.gz --exclude='*.sql' .
# ===== call2/settings.py
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
# ===== call2/t46.sh
#!/usr/bin/env bash
# Session 13 call 2 (after the fix of aggregates whose fusion took no nodes): the GPU suite on the library with cached regions run as one partition
# (gpu.table_cache.one_partition), SF1 TPC-H and SSB over GpuCachedTable with every operator on
# the GPU and every answer checked, then SF10 SSB in the CLI with the option on and off (same binary).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o46; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device5/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 320 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
for suite in tpch ssb; do
  left=$(( 560 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  grep -c "read as one" $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite scan lines read as one: /"
done
for suite in ssb tpch; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  left=$(( 585 - $(el) )); [ $left -lt 100 ] && { echo "no time for $suite SF10"; continue; }
  timeout 90 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  left=$(( 585 - $(el) ))
  SUITES=$suite ROUNDS=1 BUDGET_S=$left timeout $left python3 .device5/settings.py $out one=$cli "parts=$cli:SET gpu.table_cache.one_partition = false" 2>&1 | tail -27
done
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t46.tar.gz --exclude='*.sql' .
# ===== call3/t47.sh
#!/usr/bin/env bash
# Session 13 call 3/4: SF10 $SUITE over GpuCachedTable (cached regions in one partition, the new
# default) with 10 timed runs a query, every answer checked; DuckDB 2.0.1 beside it in the same
# call (same Parquet, same query texts, 16 threads, 10 timed runs after a warm-up).
set -uo pipefail
suite=$1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o47-$suite; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device5/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
echo "data at $(el) s"
timeout $(( 520 - $(el) )) $cli bench $suite --sf 10 --iterations 10 --data /tmp/dfg-data --residency cached --out $out/records --label cached-one-partition-10 > $out/$suite-cached-10.log 2>&1
echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
timeout $(( 585 - $(el) )) python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-$suite-sf10-cached-one-partition-10.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t47-$suite.tar.gz .
# ===== call4/t47.sh
#!/usr/bin/env bash
# Session 13 call 3/4: SF10 $SUITE over GpuCachedTable (cached regions in one partition, the new
# default) with 10 timed runs a query, every answer checked; DuckDB 2.0.1 beside it in the same
# call (same Parquet, same query texts, 16 threads, 10 timed runs after a warm-up).
set -uo pipefail
suite=$1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o47-$suite; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device5/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
echo "data at $(el) s"
timeout $(( 520 - $(el) )) $cli bench $suite --sf 10 --iterations 10 --data /tmp/dfg-data --residency cached --out $out/records --label cached-one-partition-10 > $out/$suite-cached-10.log 2>&1
echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
timeout $(( 585 - $(el) )) python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-$suite-sf10-cached-one-partition-10.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t47-$suite.tar.gz .
# ===== call5/t48.sh
#!/usr/bin/env bash
# Session 13 call 5: pageable host tables (the runner's default residency: every GPU query uploads
# what it reads, nothing cached) at SF10 beside DuckDB 2.0.1 in the same call, one timed run a
# query after the checked run (the session's device time allowed no more), every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=$OUT/o48; mkdir -p $out/records /tmp/b
xz -dc .device5/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
for suite in tpch ssb; do
  left=$(( 255 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 80 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  left=$(( 255 - $(el) ))
  timeout $left $cli bench $suite --sf 10 --iterations 1 --data /tmp/dfg-data --residency pageable --out $out/records --label pageable-1 > $out/$suite-pageable-1.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-pageable-1.log) $(grep -h 'results:' $out/$suite-pageable-1.log)"
  left=$(( 270 - $(el) )); [ $left -lt 15 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 3 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  r=$(ls $out/records/*-$suite-sf10-pageable-1.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -3
done
echo "done at $(el) s"
gzip $out/*.log
