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
