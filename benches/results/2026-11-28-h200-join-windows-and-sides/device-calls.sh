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
# ===== call1/t50.sh
#!/usr/bin/env bash
# Session 14 call 1: where SSB's time goes at SF10 over GpuCachedTable (debug timeline and EXPLAIN
# ANALYZE of q1.1, q2.1, q3.4, q4.2), and same-binary A/B of gpu.cost.min_rows (100000 vs 0) and
# placement=always on SSB and TPC-H (CLI, GPU only, 4 runs a query, median of the last 3).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o50; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench ssb --sf 10 --iterations 2 --queries 1.1,2.1,3.4,4.2 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
echo "timeline rc=$? at $(el) s"; grep -E "^q[0-9.]+ " $out/ssb-timeline.log
left=$(( 330 - $(el) ))
SUITES=ssb ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "rows0=$cli:SET gpu.cost.min_rows = 0" "always=$cli:SET gpu.cost.min_rows = 0;SET gpu.placement = always" 2>&1 | tail -17
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
left=$(( 585 - $(el) ))
SUITES=tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "rows0=$cli:SET gpu.cost.min_rows = 0" 2>&1 | tail -26
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t50.tar.gz --exclude='*.sql' .
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
# ===== call2/t51.sh
#!/usr/bin/env bash
# Session 14 call 2: same-binary A/B of the join's output window (gpu.batch_rows 4M default, 16M,
# 64M) and the probe read-ahead, SSB and TPC-H SF10 over gpu_cache'd tables (CLI, GPU only, 4 runs a
# query, median of the last 3).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o51; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
wait; echo "data at $(el) s"
left=$(( 330 - $(el) ))
SUITES=ssb ROUNDS=2 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "b16M=$cli:SET gpu.batch_rows = 16777216" "b64M=$cli:SET gpu.batch_rows = 67108864" "ra4=$cli:SET gpu.join.probe_read_ahead = 4" 2>&1 | tail -17
left=$(( 585 - $(el) ))
SUITES=tpch ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out def=$cli "b16M=$cli:SET gpu.batch_rows = 16777216" "b64M=$cli:SET gpu.batch_rows = 67108864" 2>&1 | tail -26
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t51.tar.gz --exclude='*.sql' .
# ===== call3/settings.py
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
# ===== call3/t52.sh
#!/usr/bin/env bash
# Session 14 call 3: the GPU suite and SF1 answers (TPC-H, SSB over GpuCachedTable, every operator
# on the GPU) on the code with gpu.join.window_rows and gpu.join.swap_at_run_time; then SF10 A/B of
# both options (CLI, GPU only, same binary) and the timeline of SSB q2.1 and q4.2.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o52; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
grep -A3 "swap at run time" $out/tests.log | grep -E "joins swapped" | head -4
for suite in tpch ssb; do
  left=$(( 470 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  grep -E "swapped_at_run_time=[1-9]" -c $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite join lines swapped at run time: /"
done
left=$(( 560 - $(el) ))
[ $left -gt 30 ] && SUITES=ssb ROUNDS=1 BUDGET_S=$left timeout $left python3 .device6/settings.py $out new=$cli "win4M=$cli:SET gpu.join.window_rows = 4194304" "noswap=$cli:SET gpu.join.swap_at_run_time = false" 2>&1 | tail -17
left=$(( 590 - $(el) ))
[ $left -gt 20 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 2.1,4.2 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
grep -E "^q[0-9.]+ " $out/ssb-timeline.log
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t52.tar.gz --exclude='*.sql' .
# ===== call4/settings.py
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
# ===== call4/t53.sh
#!/usr/bin/env bash
# Session 14 call 4: the GPU suite and SF1 answers (TPC-H, SSB over GpuCachedTable, every operator
# on the GPU) on the final library (window_rows, swap_at_run_time, the cache key's digest); SF10
# SSB A/B of the two options (CLI, GPU only, same binary) and q2.1's timeline.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o53; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device6/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1 &
timeout 330 $lib --test-threads 3 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
wait
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
grep -E "joins swapped" $out/tests.log | head -4
for suite in tpch ssb; do
  left=$(( 440 - $(el) )); [ $left -lt 40 ] && { echo "no time for $suite SF1"; continue; }
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 60 $cli bench $suite --sf 1 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-sf1-$suite.log 2>&1
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  grep -E "swapped_at_run_time=[1-9]" -c $out/$suite-sf1-cached-table-always.log | sed "s/^/$suite join lines swapped at run time: /"
done
left=$(( 545 - $(el) ))
[ $left -gt 30 ] && SUITES=ssb ROUNDS=2 BUDGET_S=$left timeout $left python3 .device6/settings.py $out new=$cli "noswap=$cli:SET gpu.join.swap_at_run_time = false" "win4M=$cli:SET gpu.join.window_rows = 4194304" 2>&1 | tail -17
left=$(( 590 - $(el) ))
[ $left -gt 15 ] && RUST_LOG=datafusion_gpu::timeline=debug timeout $left $cli bench ssb --sf 10 --iterations 2 --cpu-iterations 0 --queries 2.1 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
grep -E "^q[0-9.]+ " $out/ssb-timeline.log; grep "cached scan" $out/ssb-timeline.log | tail -8 | cut -c50-
echo "done at $(el) s"
gzip $out/*.log
cd $out && tar czf $OUT/t53.tar.gz --exclude='*.sql' .
# ===== call5/t54.sh
#!/usr/bin/env bash
# Session 14 call 5: SF10 SSB and TPC-H over GpuCachedTable (the defaults) with 10 timed GPU runs a
# query (one timed CPU run; every answer checked against DataFusion's), DuckDB 2.0.1 beside it in
# the same call (same Parquet, same query texts, 16 threads, 10 timed runs after a warm-up).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o54; rm -rf $out; mkdir -p $out/records /tmp/b
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
  left=$(( 570 - $(el) )); [ $left -lt 60 ] && { echo "no time for $suite"; continue; }
  timeout $left $cli bench $suite --sf 10 --iterations 10 --cpu-iterations 1 --data /tmp/dfg-data --residency cached --out $out/records --label cached-10 > $out/$suite-cached-10.log 2>&1
  echo "$suite rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-10.log) $(grep -h 'results:' $out/$suite-cached-10.log)"
  left=$(( 585 - $(el) ))
  timeout $left python3 scripts/duckdb-peer.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 10 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "duckdb $suite rc=$? at $(el) s"
  r=$(ls $out/records/*-$suite-sf10-cached-10.json 2>/dev/null | head -1)
  [ -n "$r" ] && [ -f $out/duckdb-$suite.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-$suite.json | tail -25
done
gzip $out/*.log
cd $out && tar czf $OUT/t54.tar.gz .
# ===== call6/t55.sh
#!/usr/bin/env bash
# Session 14 call 6: TPC-H SF30 over GpuCachedTable beside DuckDB 2.0.1 (a larger scale factor
# toward issue 46's "largest SF on an H200"): 3 timed GPU runs a query, every answer checked, no
# timed CPU runs; DuckDB 3 timed runs after a warm-up, same Parquet and query texts.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o55; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device6/cli.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
free -g | head -2
timeout 230 $cli bench tpch --sf 30 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "data rc=$? at $(el) s"; du -sh /tmp/dfg-data/tpch-sf30 2>/dev/null
left=$(( 290 - $(el) ))
[ $left -gt 60 ] && timeout $left $cli bench tpch --sf 30 --iterations 3 --cpu-iterations 0 --data /tmp/dfg-data --residency cached --out $out/records --label cached-3 > $out/tpch-sf30-cached-3.log 2>&1
echo "tpch SF30 rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-sf30-cached-3.log) $(grep -h 'results:' $out/tpch-sf30-cached-3.log)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
left=$(( 345 - $(el) ))
[ $left -gt 30 ] && timeout $left python3 scripts/duckdb-peer.py tpch 30 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/tpch 3 $out/duckdb-tpch.json > $out/duckdb-tpch.log 2>&1
echo "duckdb rc=$? at $(el) s"
r=$(ls $out/records/*-tpch-sf30-cached-3.json 2>/dev/null | head -1)
[ -n "$r" ] && [ -f $out/duckdb-tpch.json ] && python3 scripts/beside-duckdb.py $r $out/duckdb-tpch.json | tail -25
gzip $out/*.log
cd $out && tar czf $OUT/t55.tar.gz .
