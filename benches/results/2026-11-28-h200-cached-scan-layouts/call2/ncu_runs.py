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
