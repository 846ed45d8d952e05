"""DuckDB beside the runner, on the same machine: loads the runner's Parquet (DIR/<suite>-sf<SF>/*.parquet)
into DuckDB's own in-memory tables, runs the runner's query texts with 16 threads, one warm-up run then
N timed runs a query, and prints the median of each with its row count; writes JSON.
   usage: python3 scripts/duckdb-peer.py SUITE SF DATA_DIR QUERY_DIR RUNS OUT.json [views]
   (with `views`, each table is a view over read_parquet of its file: DuckDB reading the files)
   (the DuckDB column of the records in benches/results)
   With DUCKDB_PEER_ROWS=DIR set, each query's rows (from its first, untimed run) are written to
   DIR/<query>.csv, so that a record can check DuckDB's values against the GPU's."""
import csv, glob, json, os, statistics, sys, time
import duckdb

suite, sf, data, qdir, runs, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
views = len(sys.argv) > 7 and sys.argv[7] == "views"
con = duckdb.connect(":memory:")
con.execute("SET threads = 16")
t = time.time()
folder = os.path.join(data, f"{suite}-sf{sf}")
for f in sorted(glob.glob(os.path.join(folder, "*.parquet"))):
    name = os.path.basename(f)[:-len(".parquet")]
    kind = "VIEW" if views else "TABLE"
    con.execute(f"CREATE {kind} {name} AS SELECT * FROM read_parquet('{f}')")
load = time.time() - t
print(f"DuckDB {duckdb.__version__}: {suite} SF {sf} loaded from {folder} in {load:.1f} s", flush=True)

def key(p):
    return [int(x) for x in os.path.basename(p)[1:-4].split(".")]

report = {"duckdb": duckdb.__version__, "suite": suite, "sf": sf, "load_seconds": load, "runs": runs,
          "tables": "read_parquet views" if views else "in-memory tables", "queries": []}
for path in sorted(glob.glob(os.path.join(qdir, "q*.sql")), key=key):
    q = os.path.basename(path)[:-4]
    sql = open(path).read()
    try:
        result = con.execute(sql).fetchall()
        rows = len(result)
        if os.environ.get("DUCKDB_PEER_ROWS"):
            os.makedirs(os.environ["DUCKDB_PEER_ROWS"], exist_ok=True)
            with open(os.path.join(os.environ["DUCKDB_PEER_ROWS"], f"{q}.csv"), "w", newline="") as f:
                csv.writer(f).writerows(result)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            con.execute(sql).fetchall()
            times.append((time.perf_counter() - t) * 1000)
        ms = statistics.median(times)
        print(f"{q:<6} {ms:9.1f} ms  rows {rows}", flush=True)
        report["queries"].append({"query": q, "ms": ms, "runs_ms": times, "rows": rows})
    except Exception as e:
        print(f"{q:<6} error: {e}", flush=True)
        report["queries"].append({"query": q, "error": str(e)})
    # Written after every query: a run cut at its time limit keeps what it measured.
    json.dump(report, open(out, "w"), indent=1)
json.dump(report, open(out, "w"), indent=1)
