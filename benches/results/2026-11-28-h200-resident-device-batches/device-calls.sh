# ===== call1/t39.sh
#!/usr/bin/env bash
# Session 12 call 1: the GPU suite (one-group reductions per block, filters over GPU operators on the device), then SF1 TPC-H
# and SSB over GpuCachedTable with every operator on the GPU, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o39; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device4/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
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
for suite in tpch ssb; do grep -c "GpuFilterProjectExec: on the GPU=\[FilterExec" $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite GPU filter-project lines: /"; done
grep -A3 "^q11 with the GPU rule" $out/tpch-sf1-cached-table-always.log | cut -c1-200
gzip $out/*.log
cd $out && tar czf $OUT/t39.tar.gz .
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
# ===== call2/t40.sh
#!/usr/bin/env bash
# Session 12 call 2: same-machine A/B of the CLI before (session 11's, b8d6452's code) and after
# this session's changes, GPU only over gpu_cache'd SF10 tables; and the new CLI with fewer
# partitions and one device batch per partition (target_partitions 4 and 1, gpu.batch_rows 2^26).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o40; rm -rf $out; mkdir -p $out /tmp/b/old
xz -dc .device2/cli.tar.xz | tar xf - -C /tmp/b/old; xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*/* /tmp/b/datafusion-gpu
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu; old=/tmp/b/old/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
[ -d /tmp/dfg-data/ssb-sf10 ] || timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
[ -d /tmp/dfg-data/tpch-sf10 ] || timeout 130 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data at $(el) s"
B="SET gpu.batch_rows = 67108864"
ROUNDS=2 BUDGET_S=$(( 585 - $(el) )) timeout $(( 588 - $(el) )) python3 .device4/settings.py $out old=$old new=$cli \
  "p4-b64M=$cli:SET datafusion.execution.target_partitions = 4;$B" "p1-b64M=$cli:SET datafusion.execution.target_partitions = 1;$B" 2>&1 | tail -45
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t40.tar.gz --exclude='*.sql' .
# ===== call3/t41.sh
#!/usr/bin/env bash
# Session 12 call 3: the GPU suite (one-group reductions per block, filters over GPU operators and checked decimal casts on the device, cached tables read in device batches of gpu.table_cache.batch_rows), then SF1 TPC-H
# and SSB over GpuCachedTable with every operator on the GPU, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o41; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device4/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
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
for suite in tpch ssb; do grep -c "GpuFilterProjectExec: on the GPU=\[FilterExec" $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite GPU filter-project lines: /"; done
grep -A3 "^q11 with the GPU rule" $out/tpch-sf1-cached-table-always.log | cut -c1-200
gzip $out/*.log
cd $out && tar czf $OUT/t41.tar.gz .
# ===== call4/t42.sh
#!/usr/bin/env bash
# Session 12 call 4: SF10 TPC-H and SSB over GpuCachedTable (device batches of
# gpu.table_cache.batch_rows = 2^26 rows) beside DuckDB 2.0.1 in the same call (same Parquet, same
# query texts, 16 threads); then the CLI with that default against 2^22-row cache batches.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o42; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
for suite in ssb tpch; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  [ -d /tmp/dfg-data/$suite-sf10 ] || timeout 130 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  left=$(( 470 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 500 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-table.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -4
done
left=$(( 585 - $(el) ))
[ $left -gt 60 ] && SUITES=ssb,tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device4/settings.py $out b64M=$cli "b4M=$cli:SET gpu.table_cache.batch_rows = 4194304" 2>&1 | tail -42
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t42.tar.gz --exclude='*.sql' .
# ===== call5/t43.sh
#!/usr/bin/env bash
# Session 12 call 5: debug timelines of SSB q1.1 and q3.4 at SF10 over GpuCachedTable (device
# batches of 2^26 rows), planned in 16 partitions and in 1, to see what the 15 partitions that
# read no rows cost.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o43; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
[ -d /tmp/dfg-data/ssb-sf10 ] || timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "data at $(el) s"
for p in 16 1; do
  left=$(( 270 - $(el) )); [ $left -lt 20 ] && break
  RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --queries 1.1,3.4 --partitions $p --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline-p$p.log 2>&1
  echo "p$p rc=$? at $(el) s"; grep -E "^q(1.1|3.4) " $out/ssb-timeline-p$p.log
done
gzip $out/*.log
cd $out && tar czf $OUT/t43.tar.gz .
# ===== call6/t44.sh
#!/usr/bin/env bash
# Session 12 call 6: TPC-H SF10 over GpuCachedTable with 10 timed runs a query (issue 46's count),
# DuckDB 2.0.1 beside it in the same call with 10 timed runs, final code (741ccd0).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o44; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device4/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data at $(el) s"
timeout $(( 205 - $(el) )) $cli bench tpch --sf 10 --iterations 10 --data /tmp/dfg-data --residency cached --out $out/records --label cached-table-10 > $out/tpch-cached-table-10.log 2>&1
echo "tpch rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-cached-table-10.log) $(grep -h 'results:' $out/tpch-cached-table-10.log)"
timeout $(( 245 - $(el) )) python3 scripts/duckdb-peer.py tpch 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 10 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-tpch-sf10-cached-table-10.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-tpch.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-tpch.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t44.tar.gz .
