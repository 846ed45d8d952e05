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
