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
