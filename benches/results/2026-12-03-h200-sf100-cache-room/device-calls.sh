#!/usr/bin/env bash
# The device calls of this record, run on the H200 from the repository root: .device/bin held the
# CLI (and, for A and 3, the lib test binary) packed by ../shared/tools/device-pack, .whl/ the DuckDB
# 2.0.1 wheel; benches/results was moved out so that a call carries under 64 MiB. Then, here:
# summarize.py (at the end) made the JSON and PNG from the calls archives.

# ===== .calls/callA.sh
#!/usr/bin/env bash
# Call A: the GPU library suite (join differential tests beside it) and the bench crate's tests.
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
( timeout 540 /tmp/b/$lib --test-threads 6 --skip join::tests > $out/tests.log 2>&1; echo "lib tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 540 /tmp/b/$lib --test-threads 2 join::tests > $out/tests-join.log 2>&1; echo "join tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
( timeout 300 /tmp/b/$bench --test-threads 2 > $out/tests-bench.log 2>&1; echo "bench tests rc=$? at $(( $(date +%s) - t0 )) s" >> $out/rc.txt ) &
wait
echo "call A: $(( $(date +%s) - t0 )) s"
cd $out && tar czf $OUT/callA.tar.gz .
cat $out/rc.txt; grep -h "test result" $out/tests*.log; grep -hE "FAILED|panicked|^failures:|^    [a-z_:]+$" $out/tests*.log | head -30

# ===== .calls/call1.sh
#!/usr/bin/env bash
# Call 1: TPC-H SF100 through the CLI (one process, defaults, 3 passes of the 22 queries) with the
# device memory and table cache shown after each pass and the GPU rule's fallbacks logged, q18
# explained last; then DuckDB 2.0.1 on its own in-memory tables of the same files (16 threads).
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
d=/tmp/dfg-data/tpch-sf100; q=crates/datafusion-gpu-bench/tpch/queries/tpch
cache="SELECT * FROM gpu_table_cache(); SELECT regexp_replace(source, '.*/', '') AS file, count(*) AS columns, max(rows) AS rows, sum(bytes) AS bytes, sum(packed_bytes) AS packed, sum(full_width_bytes) AS arrow_width FROM gpu_table_cache_columns() GROUP BY 1 ORDER BY 1;"
{ for t in nation region supplier customer part partsupp orders lineitem; do echo "CREATE EXTERNAL TABLE $t STORED AS PARQUET LOCATION '$d/$t.parquet';"; done
  for pass in 1 2 3; do for i in $(seq 1 22); do grep -v '^--' $q/q$i.sql; echo; done; echo "$cache"; done
  echo "EXPLAIN ANALYZE $(grep -v '^--' $q/q18.sql)"; } > $out/all.sql
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -l 1 > $out/gpu-memory.csv &
smi=$!
RUST_LOG=datafusion_gpu=debug,datafusion_gpu::timeline=info $T timeout 280 $cli --format csv -f $out/all.sql > $out/all.out 2> $out/all.err
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
    print(f"pass {p+1}: total {sum(s):.2f} s, without q18 {sum(s)-s[17]:.2f} s, q18 {s[17]:.2f} s; " + " ".join(f"q{i+1}={x:.3f}" for i,x in enumerate(s)))
PY
grep -A10 -E "^(device,columns|file,columns)" $out/all.out | grep -v "^Elapsed" | head -60
grep -c "" $out/all.err; grep -v "^\s" $out/all.err | grep -E "DEBUG|INFO|WARN" | sed -E 's/^\[[^]]*\] *//' | cut -c1-160 | sort | uniq -c | sort -rn | head -25
sort -t, -k2 -n $out/gpu-memory.csv | tail -1
left=$(( 580 - $(el) ))
echo "duckdb with $left s left"
timeout $left python3 scripts/duckdb-peer.py tpch 100 /tmp/dfg-data $q 3 $out/duckdb-tpch-memory.json > $out/duckdb.log 2>&1
echo "duckdb rc=$? at $(el) s"; cat $out/duckdb.log | tail -25
gzip $out/*.out $out/*.err $out/*.log
cd $out && tar czf $OUT/call1.tar.gz .

# ===== .calls/call3.sh
#!/usr/bin/env bash
# Call 3: the GPU tests of the table cache, device memory, sessions, recovery and out-of-core joins,
# and beside them TPC-H and SSB SF1 over Parquet with the defaults, every answer checked against
# DataFusion's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o; rm -rf $out; mkdir -p $out
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
lib=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]{16}$' | head -1)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
( timeout 140 /tmp/b/$lib --test-threads 4 cached_scan_tests device::memory session:: recovery_tests out_of_core exec::query > $out/tests.log 2>&1; echo "tests rc=$? at $(el) s" >> $out/rc.txt ) &
for s in tpch ssb; do
  timeout 70 $cli bench $s --sf 1 --iterations 1 --cpu-iterations 1 --data /tmp/dfg-data --source parquet --no-save > $out/$s-sf1.log 2>&1
  echo "$s sf1 parquet defaults rc=$? at $(el) s: $(grep -h 'results:' $out/$s-sf1.log)"
done
wait; cat $out/rc.txt; grep -h "test result" $out/tests.log; grep -hE "FAILED|panicked|^    [a-z_:]+$" $out/tests.log | head -10
cd $out && tar czf $OUT/call3.tar.gz .

# ===== summarize.py
: <<'PY'
# Builds the record's JSON and PNG from the calls' archives (unpacked into call1/ and call2/):
# the CLI's statement times (passes of the 22 queries in one process), DuckDB's medians from
# call 1, and the table cache by table.
import json, math, re, sys, gzip
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

def cli_times(folder, passes):
    t = [float(x) for x in open(f"{folder}/elapsed.txt")][8:]
    return [t[p * 24:p * 24 + 22] for p in range(passes)], t[passes * 24:]

def cache_tables(folder):
    text = gzip.open(f"{folder}/all.out.gz", "rt").read()
    blocks = re.findall(r"file,columns,rows,bytes,packed,arrow_width\n(.*?)\n\d+ row", text, re.S)
    rows = []
    for line in blocks[-1].splitlines():
        f, c, r, b, p, w = line.split(",")
        rows.append({"table": f.replace(".parquet", ""), "columns": int(c), "rows": int(r), "bytes": int(b),
                     "packed_bytes": int(p), "arrow_width_bytes": int(w)})
    return rows

duck = json.load(open("call1/duckdb-tpch-memory.json"))
duck_ms = {q["query"]: q["ms"] for q in duck["queries"]}
out = {"device": open("call1/nvidia-smi.txt").read().strip(), "suite": "tpch", "sf": 100,
       "duckdb": {"version": duck["duckdb"], "threads": 16, "load_seconds": duck["load_seconds"],
                  "runs": duck["runs"], "ms": duck_ms}, "calls": {}}
for call, passes in (("call1", 3), ("call2", 2)):
    try:
        p, rest = cli_times(call, passes)
    except FileNotFoundError:
        continue
    entry = {"passes_ms": [[round(x * 1000, 1) for x in s] for s in p], "after_passes_s": rest,
             "cache_by_table": cache_tables(call)}
    for i, s in enumerate(p):
        r = [duck_ms[f"q{j+1}"] / (s[j] * 1000) for j in range(22)]
        entry.setdefault("pass_summary", []).append({"pass": i + 1, "total_s": round(sum(s), 3),
            "geomean_vs_duckdb": round(math.exp(sum(map(math.log, r)) / 22), 2), "least_vs_duckdb": round(min(r), 2),
            "least_at": f"q{r.index(min(r)) + 1}"})
    out["calls"][call] = entry
json.dump(out, open("2026-12-03-h200-tpch-sf100-cli-vs-duckdb.json", "w"), indent=1)

# The chart: per query, DuckDB's median and the GPU's warm passes (log scale).
c1 = out["calls"]["call1"]
qs = [f"q{i+1}" for i in range(22)]
fig, ax = plt.subplots(figsize=(13, 5))
x = range(22)
w = 0.27
ax.bar([i - w for i in x], [duck_ms[q] for q in qs], w, label=f"DuckDB {duck['duckdb']} in-memory, 16 threads (median of 3)")
ax.bar([i for i in x], c1["passes_ms"][1], w, label="GPU rule, CLI defaults, pass 2")
ax.bar([i + w for i in x], c1["passes_ms"][2], w, label="GPU rule, CLI defaults, pass 3")
ax.set_yscale("log"); ax.set_xticks(list(x)); ax.set_xticklabels(qs); ax.set_ylabel("ms (log)")
s2 = c1["pass_summary"][1]
ax.set_title(f"TPC-H SF100 over Parquet on one H200: pass 2 {s2['total_s']:.2f} s, "
             f"{s2['geomean_vs_duckdb']:.1f}x DuckDB geomean ({sum(duck_ms.values())/1000:.1f} s)")
ax.legend(); fig.tight_layout(); fig.savefig("2026-12-03-h200-tpch-sf100-cli-vs-duckdb.png", dpi=110)
print(json.dumps({k: v.get("pass_summary") for k, v in out["calls"].items()}, indent=1))
PY
