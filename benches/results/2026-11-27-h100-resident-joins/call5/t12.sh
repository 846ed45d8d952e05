#!/usr/bin/env bash
# Session 7 call 5 (resident tables keep their host batches for CPU parents): the GPU suite's library tests (the join differential tests but the
# repartition one left out for time), the resident-table tests; then per suite at SF10 the
# runner with GPU-resident tables (3 timed runs, EXPLAIN ANALYZE of each query) and DuckDB 2.0.1
# on the same Parquet and query texts, one machine.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o12; rm -rf $out; mkdir -p $out/records /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
nproc | tee $out/nproc.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "ready at $(el) s"
timeout 100 $lib --test-threads 1 --nocapture resident gpu_joins_without_repartitions_match_cpu > $out/tests-resident-join.log 2>&1; echo "resident + join-repartition tests rc=$? at $(el) s" | tee -a $out/tests.rc
grep -E "^test |^test result" $out/tests-resident-join.log
mkdir -p $out/fuzz
for s in 501 502 503 504; do
  ( XDG_CACHE_HOME=/tmp/dfg-cache-$s timeout 70 $cli fuzz --queries 300 --seed $s --repro-dir $out/fuzz/repro-$s > $out/fuzz/fuzz-seed$s.log 2>&1; echo "fuzz seed $s rc=$? at $(el) s" >> $out/fuzz/rc.txt ) &
done
wait
sort $out/fuzz/rc.txt; for f in $out/fuzz/fuzz-seed*.log; do tail -1 $f; done
for suite in tpch ssb; do
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout 200 $cli bench $suite --sf 10 --iterations 3 --data /tmp/dfg-data --residency gpu --explain --out $out/records --label gpu > $out/$suite-gpu.log 2>&1
  echo "$suite gpu rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-gpu.log) $(grep -h 'results:' $out/$suite-gpu.log)"
  timeout 120 python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
left=$(( 560 - $(el) ))
[ $left -gt 60 ] && { timeout $left $cli bench tpch --sf 10 --iterations 2 --data /tmp/dfg-data --residency pageable --out $out/records --label pageable > $out/tpch-pageable.log 2>&1; echo "tpch pageable rc=$? at $(el) s: $(grep -h 'total:' $out/tpch-pageable.log) $(grep -h 'results:' $out/tpch-pageable.log)"; }
for suite in tpch ssb; do
  left=$(( 585 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite SF1"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 0 --data /tmp/dfg-data --residency gpu --gpu-min-rows 0 --no-save > $out/$suite-sf1-resident-always.log 2>&1
  echo "$suite SF1 resident, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'results:' $out/$suite-sf1-resident-always.log)"
done
cd $out && tar czf $OUT/t12.tar.gz . ; cd - >/dev/null
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        f = glob.glob(f"{out}/records/*-{suite}-sf10-gpu.json")
        gpu = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
    except Exception as e:
        print(suite, "missing:", e); continue
    r = []
    print(f"{suite}: query DuckDB-ms GPU-resident-ms ratio rows")
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x {g.get('rows')}/{d.get('rows')} {g.get('check')}")
    print(f"  geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}")
    f = glob.glob(f"{out}/records/*-{suite}-sf10-pageable.json")
    if f:
        pg = {q["query"]: q for q in json.load(open(f[0]))["queries"]}
        r = [duck[q]["ms"] / pg[q]["gpu_ms"] for q in duck if pg.get(q, {}).get("gpu_ms") and duck[q].get("ms")]
        print(f"  pageable: total {sum(q['gpu_ms'] for q in pg.values()):.0f} ms, geomean vs DuckDB {math.exp(sum(map(math.log, r))/len(r)):.2f}x; slower: {sum(1 for x in r if x < 1)}")
PY
