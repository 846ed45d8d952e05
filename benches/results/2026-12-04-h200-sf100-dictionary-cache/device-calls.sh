#!/usr/bin/env bash
# The device calls of this record, run on the H200 from the repository root. .calls/tests.tar.xz
# held the lib and bench test binaries (stripped, xz -9), .device/bin the CLI packed by
# ../shared/tools/device-pack datafusion-gpu, .whl/ the DuckDB 2.0.1 wheel; benches/results was
# moved out so that a call carries under 64 MiB. Then, here: summarize.py (at the end, beside
# compare.py) made the JSON and PNG from the calls' archives.

# ===== .calls/callA.sh
#!/usr/bin/env bash
# Call A: the GPU library suite (join differential tests beside it) and the bench crate's tests,
# with the dictionary-coded cache columns.
set -uo pipefail
out=/tmp/o; rm -rf $out; mkdir -p $out
t0=$(date +%s)
mkdir -p /tmp/b && xz -dc .calls/tests.tar.xz | tar xf - -C /tmp/b
source scripts/device-env.sh >/dev/null 2>&1
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
bench=$(ls /tmp/b | grep -E '^datafusion_gpu_bench-[0-9a-f]{16}$' | head -1)
echo "unpacked in $(( $(date +%s) - t0 )) s: $lib $bench"
( timeout 530 /tmp/b/$lib --test-threads 6 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 530 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 300 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
wait
echo "call A: $(( $(date +%s) - t0 )) s"
cd $out && tar czf $OUT/callA.tar.gz .
cat $out/rc.txt; grep -h "test result" $out/tests*.log; grep -hE "FAILED|panicked|^failures:|^    [a-z_:]+$" $out/tests*.log | head -40
grep -h "running for over\|has been running" $out/tests*.log | head

# ===== .calls/callB.sh
#!/usr/bin/env bash
# Call B: TPC-H SF100 through the CLI (one process, defaults, 3 passes of the 22 queries), the
# table cache by table and encoding after each pass, q18 explained last; then DuckDB 2.0.1 on its
# own in-memory tables of the same files (16 threads), writing each query's rows for the check.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache PYTHONUNBUFFERED=1
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
T=""; [ -x /usr/bin/time ] && T="/usr/bin/time -v"
$T $cli gen tpch --sf 100 --out /tmp/dfg-data > $out/gen-tpch.log 2>&1
echo "gen rc=$? at $(el) s"; grep -h "Elapsed\|Maximum resident" $out/gen-tpch.log
d=/tmp/dfg-data/tpch-sf100
# The query texts, with q11's FRACTION at 0.0001 / SF as the specification says (the texts hold
# SF1's), for both engines.
q=/tmp/q; rm -rf $q; cp -r crates/datafusion-gpu-bench/tpch/queries/tpch $q
sed -i 's/sum(ps_supplycost \* ps_availqty) \* 0.0001/sum(ps_supplycost * ps_availqty) * 0.000001/' $q/q11.sql
grep -c "0.000001" $q/q11.sql
cache="SELECT * FROM gpu_table_cache(); SELECT regexp_replace(source, '.*/', '') AS file, count(*) AS columns, max(rows) AS rows, sum(bytes) AS bytes, sum(packed_bytes) AS packed, sum(full_width_bytes) AS arrow_width FROM gpu_table_cache_columns() GROUP BY 1 ORDER BY 1;"
{ for t in nation region supplier customer part partsupp orders lineitem; do echo "CREATE EXTERNAL TABLE $t STORED AS PARQUET LOCATION '$d/$t.parquet';"; done
  for pass in 1 2 3; do for i in $(seq 1 22); do grep -v '^--' $q/q$i.sql; echo; done; echo "$cache"; done
  echo "SELECT regexp_replace(source, '.*/', '') AS file, \"column\", data_type, bytes, packed_bytes, full_width_bytes, encoding FROM gpu_table_cache_columns() ORDER BY 1, 2;"
  for i in 1 10 17 18 19 21; do echo "EXPLAIN ANALYZE $(grep -v '^--' $q/q$i.sql)"; done; } > $out/all.sql
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -l 1 > $out/gpu-memory.csv &
smi=$!
RUST_LOG=datafusion_gpu=debug,datafusion_gpu::timeline=info $T timeout 250 $cli --format csv --maxrows inf -f $out/all.sql > $out/all.out 2> $out/all.err
echo "cli rc=$? at $(el) s"
kill $smi
grep -h "Elapsed (wall\|Maximum resident" $out/all.err
grep -o "Elapsed [0-9.]* seconds" $out/all.out | awk '{print $2}' > $out/elapsed.txt
python3 - $out/elapsed.txt <<'PY'
import sys
t=[float(x) for x in open(sys.argv[1])][8:]
for p in range(3):
    s=t[p*24:p*24+22]
    if len(s)<22: print("pass",p+1,"incomplete",s); break
    print(f"pass {p+1}: total {sum(s):.2f} s, q18 {s[17]:.2f} s; " + " ".join(f"q{i+1}={x:.3f}" for i,x in enumerate(s)))
PY
grep -A10 -E "^(file,columns)" $out/all.out | grep -v "^Elapsed" | tail -12
grep -A80 -E "^file,column,data_type" $out/all.out | grep -v "^Elapsed" | head -60
grep -c "" $out/all.err; grep -v "^\s" $out/all.err | grep -E "DEBUG|INFO|WARN" | sed -E 's/^\[[^]]*\] *//' | cut -c1-160 | sort | uniq -c | sort -rn | head -20
sort -t, -k2 -n $out/gpu-memory.csv | tail -1
left=$(( 585 - $(el) ))
echo "duckdb with $left s left"
DUCKDB_PEER_ROWS=$out/duckdb-rows timeout $left python3 scripts/duckdb-peer.py tpch 100 /tmp/dfg-data $q 3 $out/duckdb-tpch-memory.json > $out/duckdb.log 2>&1
echo "duckdb rc=$? at $(el) s"; tail -25 $out/duckdb.log
python3 .calls/compare.py $out/all.out $out/duckdb-rows 56 $(seq -s, -f 'q%g' 1 22) | tail -23
gzip $out/*.out $out/*.err $out/*.log
tar czf $out/duckdb-rows.tar.gz -C $out duckdb-rows && rm -rf $out/duckdb-rows; cd $out && tar czf $OUT/callB.tar.gz .

# ===== .calls/callC.sh
#!/usr/bin/env bash
# Call C: SSB SF100 through the CLI (one process, defaults, 3 passes of the 13 queries), the
# table cache by table after each pass and by column at the end; then DuckDB 2.0.1 on its own
# in-memory tables of the same files (16 threads), its values checked against the GPU's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache PYTHONUNBUFFERED=1
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
T=""; [ -x /usr/bin/time ] && T="/usr/bin/time -v"
$T $cli gen ssb --sf 100 --out /tmp/dfg-data > $out/gen-ssb.log 2>&1
echo "gen rc=$? at $(el) s"; grep -h "Elapsed\|Maximum resident" $out/gen-ssb.log; du -sh /tmp/dfg-data/ssb-sf100
d=/tmp/dfg-data/ssb-sf100; q=crates/datafusion-gpu-bench/tpch/queries/ssb
names="q1.1 q1.2 q1.3 q2.1 q2.2 q2.3 q3.1 q3.2 q3.3 q3.4 q4.1 q4.2 q4.3"
cache="SELECT * FROM gpu_table_cache(); SELECT regexp_replace(source, '.*/', '') AS file, count(*) AS columns, max(rows) AS rows, sum(bytes) AS bytes, sum(packed_bytes) AS packed, sum(full_width_bytes) AS arrow_width FROM gpu_table_cache_columns() GROUP BY 1 ORDER BY 1;"
{ for t in date customer supplier part lineorder; do echo "CREATE EXTERNAL TABLE \"$t\" STORED AS PARQUET LOCATION '$d/$t.parquet';"; done
  for pass in 1 2 3; do for n in $names; do grep -v '^--' $q/$n.sql; echo; done; echo "$cache"; done
  echo "SELECT regexp_replace(source, '.*/', '') AS file, \"column\", data_type, bytes, packed_bytes, full_width_bytes, encoding FROM gpu_table_cache_columns() ORDER BY 1, 2;"
  for n in q2.1 q3.1 q4.1; do echo "EXPLAIN ANALYZE $(grep -v '^--' $q/$n.sql)"; done; } > $out/all.sql
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -l 1 > $out/gpu-memory.csv &
smi=$!
RUST_LOG=datafusion_gpu=debug,datafusion_gpu::timeline=info $T timeout 200 $cli --format csv --maxrows inf -f $out/all.sql > $out/all.out 2> $out/all.err
echo "cli rc=$? at $(el) s"
kill $smi
grep -h "Elapsed (wall\|Maximum resident" $out/all.err
grep -o "Elapsed [0-9.]* seconds" $out/all.out | awk '{print $2}' > $out/elapsed.txt
python3 - $out/elapsed.txt <<'PY'
import sys
t=[float(x) for x in open(sys.argv[1])][5:]
for p in range(3):
    s=t[p*15:p*15+13]
    if len(s)<13: print("pass",p+1,"incomplete",s); break
    print(f"pass {p+1}: total {sum(s):.3f} s; " + " ".join(f"{x:.3f}" for x in s))
PY
grep -A8 -E "^(file,columns)" $out/all.out | grep -v "^Elapsed" | tail -8
grep -A40 -E "^file,column,data_type" $out/all.out | grep -v "^Elapsed" | head -40
grep -v "^\s" $out/all.err | grep -E "DEBUG|INFO|WARN" | sed -E 's/^\[[^]]*\] *//' | cut -c1-160 | sort | uniq -c | sort -rn | head -15
sort -t, -k2 -n $out/gpu-memory.csv | tail -1
left=$(( 585 - $(el) ))
echo "duckdb with $left s left"
DUCKDB_PEER_ROWS=$out/duckdb-rows timeout $left python3 scripts/duckdb-peer.py ssb 100 /tmp/dfg-data $q 3 $out/duckdb-ssb-memory.json > $out/duckdb.log 2>&1
echo "duckdb rc=$? at $(el) s"; tail -16 $out/duckdb.log
python3 .calls/compare.py $out/all.out $out/duckdb-rows 35 $(echo $names | tr ' ' ,) | tail -14
gzip $out/*.out $out/*.err $out/*.log
tar czf $out/duckdb-rows.tar.gz -C $out duckdb-rows && rm -rf $out/duckdb-rows; cd $out && tar czf $OUT/callC.tar.gz .

# ===== call D (one command line): TPC-H and SSB SF1 through the runner, over Parquet with the
# defaults and with --residency cached, every answer checked against DataFusion's CPU engine.
# source scripts/device-env.sh >/dev/null 2>&1; export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
# for s in tpch ssb; do for mode in "--source parquet" "--residency cached"; do
#   timeout 100 /tmp/b/datafusion-gpu bench $s --sf 1 --iterations 2 --cpu-iterations 1 --data /tmp/dfg-data $mode --no-save
# done; done

# ===== .calls/callE.sh (.calls/lib.xz: the lib test binary with the Float64-to-decimal cast)
#!/usr/bin/env bash
# Call E: Float64-to-decimal casts on the GPU. The expression and codegen GPU tests, TPC-H and
# SSB SF1 through the runner (Parquet defaults and cached, every answer checked against
# DataFusion's), and TPC-H SF10 through the CLI (2 passes, q17 explained) to see q17's cast move.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .calls/lib.xz > /tmp/b/libtests && chmod +x /tmp/b/libtests
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 150 /tmp/b/libtests --test-threads 4 exec::expression_tests expr:: join::filter > $out/tests.log 2>&1; echo "tests rc=$? at $(el) s" >> $out/rc.txt ) &
for s in tpch ssb; do for mode in "--source parquet" "--residency cached"; do
  [ $s = ssb ] && [ "$mode" = "--residency cached" ] && continue
  f=$out/$s-sf1-$(echo $mode | tr -d ' -').log
  timeout 60 $cli bench $s --sf 1 --iterations 1 --cpu-iterations 1 --data /tmp/dfg-data $mode --no-save > $f 2>&1
  echo "$s sf1 $mode rc=$? at $(el) s: $(grep -h 'results:' $f)"
done; done
timeout 40 $cli gen tpch --sf 10 --out /tmp/dfg-data > $out/gen.log 2>&1; echo "gen sf10 rc=$? at $(el) s"
d=/tmp/dfg-data/tpch-sf10; q=crates/datafusion-gpu-bench/tpch/queries/tpch
{ for t in nation region supplier customer part partsupp orders lineitem; do echo "CREATE EXTERNAL TABLE $t STORED AS PARQUET LOCATION '$d/$t.parquet';"; done
  for pass in 1 2; do for i in $(seq 1 22); do grep -v '^--' $q/q$i.sql; echo; done; done
  echo "EXPLAIN ANALYZE $(grep -v '^--' $q/q17.sql)"; } > $out/all.sql
RUST_LOG=datafusion_gpu=debug timeout 60 $cli --format csv --maxrows inf -f $out/all.sql > $out/all.out 2> $out/all.err
echo "cli rc=$? at $(el) s"
grep -o "Elapsed [0-9.]* seconds" $out/all.out | awk '{print $2}' > $out/elapsed.txt
python3 - $out/elapsed.txt <<'PY'
import sys
t=[float(x) for x in open(sys.argv[1])][8:]
for p in range(2):
    s=t[p*22:p*22+22]
    if len(s)<22: print("pass",p+1,"incomplete"); break
    print(f"pass {p+1}: total {sum(s):.3f} s, q17 {s[16]:.3f} s")
PY
grep -o "ProjectionExec: expr=\[CAST([^]]*\]" $out/all.out | head -3
grep -c "Float64 to Decimal128" $out/all.err
wait; cat $out/rc.txt; grep -h "test result" $out/tests.log; grep -hE "FAILED|panicked|^    [a-z_:]+$" $out/tests.log | head -10
gzip $out/*.out $out/*.err $out/*.log
cd $out && tar czf $OUT/callE.tar.gz .

# ===== .calls/compare.py
: <<'PY'
# Checks DuckDB's values against the GPU session's: the CLI's CSV answers (all.out.gz, one
# block a statement) beside duckdb-rows/<q>.csv, row by row in order (every TPC-H query has an
# ORDER BY), numbers within a relative 1e-6 (DataFusion prints averages to 6 decimals).
import csv, gzip, io, math, re, sys

def cli_blocks(path):
    text = (gzip.open(path, "rt") if path.endswith(".gz") else open(path)).read()
    blocks, cur = [], []
    for line in text.splitlines(keepends=True):
        m = re.match(r"^(\d+) row\(s\) fetched\.", line)
        if m:
            rows = list(csv.reader(io.StringIO("".join(cur))))
            blocks.append((int(m.group(1)), rows))
            cur = []
        elif line.startswith("Elapsed ") or (line.strip() == "" and not cur):
            continue
        else:
            cur.append(line)
    return blocks

def same(a, b):
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a.strip() == b.strip()
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)

def ordered_diff(gpu_rows, duck_rows):
    if len(gpu_rows) != len(duck_rows):
        return f"rows {len(gpu_rows)} vs {len(duck_rows)}"
    for i, (g, d) in enumerate(zip(gpu_rows, duck_rows)):
        if len(g) != len(d) or not all(same(x, y) for x, y in zip(g, d)):
            return f"row {i}: {g} vs {d}"
    return None

def compare(gpu_rows, duck_rows):
    """None when the rows agree in order; else what differs. Rows that agree as a multiset, in an
    order whose values of some column agree row by row (the ORDER BY key), differ only in how ties
    of that key are ordered: said as such."""
    diff = ordered_diff(gpu_rows, duck_rows)
    if diff is None or len(gpu_rows) != len(duck_rows):
        return diff
    if ordered_diff(sorted(gpu_rows), sorted(duck_rows)) is not None:
        return diff
    width = len(gpu_rows[0]) if gpu_rows else 0
    keys = [j for j in range(width) if all(same(g[j], d[j]) for g, d in zip(gpu_rows, duck_rows))]
    if keys:
        return f"TIES: the same rows, the same column {keys[-1] + 1} row by row; ties in another order ({diff})"
    return diff

if __name__ == "__main__":
    # all.out(.gz), the DuckDB rows' folder, the block of the pass's first query (the CREATE
    # statements come first; each pass is the queries and the 2 cache queries), and the
    # queries' names in order.
    out, rows_dir, first, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
    blocks = cli_blocks(out)
    ok = 0
    for i, q in enumerate(names):
        n, rows = blocks[first + i]
        body = rows[1:] if n > 0 else []
        try:
            duck = list(csv.reader(open(f"{rows_dir}/{q}.csv")))
        except FileNotFoundError:
            print(f"{q}: no DuckDB rows"); continue
        diff = compare(body, duck) if len(body) == n else f"the CLI printed {len(body)} of {n} rows"
        verdict = 'same values, in order' if diff is None else diff if diff.startswith('TIES') else 'DIFFER: ' + diff
        print(f"{q}: {verdict}")
        ok += diff is None or diff.startswith('TIES')
    print(f"{ok}/{len(names)} the same (ties of the ORDER BY key in either order)")
PY

# ===== summarize.py
: <<'PY'
# Builds the record's JSON and PNG from the calls' archives (unpacked into callB/ and callC/, the
# DuckDB rows into duckB/ and duckC/): the CLI's statement times (3 passes in one process), DuckDB's
# medians, each pass's answers checked against DuckDB's values (compare.py), the table cache by
# table and column, and each query's floor: the at-rest bytes of the cached columns its text
# names, read once at the H200's 3.9 TB/s device copy bandwidth.
import gzip, json, math, re, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
sys.path.insert(0, ".")
import compare

HBM = 3.9e12
SUITES = {
    "tpch": dict(call="callB", duck="duckB", creates=8, names=[f"q{i}" for i in range(1, 23)],
                 qdir="crates/datafusion-gpu-bench/tpch/queries/tpch", prefixes="l|o|c|p|ps|s|n|r"),
    "ssb": dict(call="callC", duck="duckC", creates=5,
                names="q1.1 q1.2 q1.3 q2.1 q2.2 q2.3 q3.1 q3.2 q3.3 q3.4 q4.1 q4.2 q4.3".split(),
                qdir="crates/datafusion-gpu-bench/tpch/queries/ssb", prefixes="lo|c|s|p|d"),
}


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def cache_columns(text):
    block = re.findall(r"file,column,data_type,bytes,packed_bytes,full_width_bytes,encoding\n(.*?)\n\d+ row", text, re.S)[-1]
    rows = []
    for r in __import__("csv").reader(block.splitlines()):
        f, c, t, b, p, w, e = r
        b, p, w = int(b), int(p), int(w)
        rows.append({"table": f.replace(".parquet", ""), "column": c, "data_type": t, "bytes": b,
                     "at_rest_bytes": p if p > 0 else b, "arrow_width_bytes": w, "encoding": e})
    return rows


def by_table(columns):
    out = {}
    for c in columns:
        t = out.setdefault(c["table"], {"columns": 0, "bytes": 0, "at_rest_bytes": 0, "arrow_width_bytes": 0})
        t["columns"] += 1
        for k in ("bytes", "at_rest_bytes", "arrow_width_bytes"):
            t[k] += c[k]
    for t in out.values():
        t["at_rest_share_of_arrow_width"] = round(t["at_rest_bytes"] / max(t["arrow_width_bytes"], 1), 3)
    return out


result = {"device": open("callB/nvidia-smi.txt").read().strip(), "sf": 100, "suites": {}}
for suite, s in SUITES.items():
    folder, names = s["call"], s["names"]
    n, per_pass = len(names), len(names) + 2
    times = [float(x) for x in open(f"{folder}/elapsed.txt")][s["creates"]:]
    passes = [times[p * per_pass:p * per_pass + n] for p in range(3)]
    text = gzip.open(f"{folder}/all.out.gz", "rt").read()
    err = gzip.open(f"{folder}/all.err.gz", "rt").read()
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    duck = json.load(open(f"{folder}/duckdb-{suite}-memory.json"))
    duck_ms = {q["query"]: q["ms"] for q in duck["queries"]}
    columns = cache_columns(text)
    at_rest = {c["column"]: c["at_rest_bytes"] for c in columns}
    floors = {}
    for q in names:
        sql = open(f"{s['qdir']}/{q}.sql").read()
        named = set(re.findall(rf"\b(?:{s['prefixes']})_[a-z0-9]+\b", sql))
        floors[q] = sum(at_rest.get(c, 0) for c in named) / HBM * 1e3
    checks = []
    blocks = compare.cli_blocks(f"{folder}/all.out.gz")
    for p in range(3):
        first = s["creates"] + p * per_pass
        verdicts = {}
        for i, q in enumerate(names):
            rows_n, rows = blocks[first + i]
            body = rows[1:] if rows_n > 0 else []
            duck_rows = list(__import__("csv").reader(open(f"{s['duck']}/duckdb-rows/{q}.csv")))
            diff = compare.compare(body, duck_rows) if len(body) == rows_n else "the CLI printed part of the rows"
            verdicts[q] = "same values, in order" if diff is None else diff
        checks.append(verdicts)
    summary = []
    for p, t in enumerate(passes):
        r = [duck_ms[q] / (t[i] * 1000) for i, q in enumerate(names)]
        summary.append({"pass": p + 1, "total_s": round(sum(t), 3), "geomean_vs_duckdb": round(geomean(r), 2),
                        "least_vs_duckdb": round(min(r), 2), "least_at": names[r.index(min(r))],
                        "answers_same_as_duckdb": sum(v.startswith(("same", "TIES")) for v in checks[p].values())})
    result["suites"][suite] = {
        "queries": names,
        "gpu_passes_ms": [[round(x * 1000, 1) for x in t] for t in passes],
        "pass_summary": summary,
        "duckdb": {"version": duck["duckdb"], "threads": 16, "tables": duck["tables"],
                   "load_seconds": round(duck["load_seconds"], 1), "runs": duck["runs"], "ms": duck_ms,
                   "total_s": round(sum(duck_ms.values()) / 1000, 2)},
        "floor_ms": {q: round(v, 2) for q, v in floors.items()},
        "pass3_over_floor": {q: round(passes[2][i] * 1000 / floors[q], 1) for i, q in enumerate(names) if floors[q] > 0},
        "answers_vs_duckdb": checks,
        "cli_peak_rss_bytes": rss_kb * 1024,
        "cache_by_table": by_table(columns),
        "cache_columns": columns,
    }
    at = sum(t["at_rest_bytes"] for t in result["suites"][suite]["cache_by_table"].values())
    wide = sum(t["arrow_width_bytes"] for t in result["suites"][suite]["cache_by_table"].values())
    result["suites"][suite]["cache_at_rest_share_of_arrow_width"] = round(at / wide, 3)
json.dump(result, open("2026-12-04-h200-sf100-dictionary-cache.json", "w"), indent=1)

fig, axes = plt.subplots(2, 1, figsize=(13, 10))
for ax, (suite, r) in zip(axes, result["suites"].items()):
    names, x, w = r["queries"], range(len(r["queries"])), 0.27
    ax.bar([i - w for i in x], [r["duckdb"]["ms"][q] for q in names], w,
           label=f"DuckDB {r['duckdb']['version']} in-memory tables, 16 threads (median of 3)")
    ax.bar(list(x), r["gpu_passes_ms"][1], w, label="GPU rule, CLI defaults over Parquet, pass 2")
    ax.bar([i + w for i in x], r["gpu_passes_ms"][2], w, label="pass 3")
    ax.scatter(list(x), [max(r["floor_ms"][q], 0.01) for q in names], marker="_", s=200, color="black",
               label="floor: at-rest bytes of the columns read, at 3.9 TB/s")
    ax.set_yscale("log"); ax.set_xticks(list(x)); ax.set_xticklabels(names); ax.set_ylabel("ms (log)")
    s3 = r["pass_summary"][2]
    ax.set_title(f"{ {'tpch': 'TPC-H', 'ssb': 'SSB'}[suite]} SF100, one H200: pass 3 {s3['total_s']:.2f} s, {s3['geomean_vs_duckdb']:.1f}x DuckDB "
                 f"geomean ({r['duckdb']['total_s']:.1f} s), least {s3['least_vs_duckdb']:.1f}x at {s3['least_at']}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=4)
fig.tight_layout(); fig.savefig("2026-12-04-h200-sf100-dictionary-cache.png", dpi=110)
print(json.dumps({k: {"passes": v["pass_summary"], "cache_share": v["cache_at_rest_share_of_arrow_width"],
                      "rss_gb": v["cli_peak_rss_bytes"] / 1e9} for k, v in result["suites"].items()}, indent=1))
PY
