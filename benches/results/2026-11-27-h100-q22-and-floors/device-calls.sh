# ===== call1/t21.sh
#!/usr/bin/env bash
# Session 9 call 1: the whole GPU test suite on the library with substr, computed string outputs and
# scalar-subquery literals; SF1 TPC-H and SSB over GpuCachedTable and over gpu.table_cache, every
# operator placed on the GPU where it can run, every answer checked against DataFusion's.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o21; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 400 $lib --test-threads 2 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -20
for suite in tpch ssb; do
  timeout 90 $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --residency cached --gpu-min-rows 0 --gpu-set gpu.placement=always --explain --no-save > $out/$suite-sf1-cached-table-always.log 2>&1
  echo "$suite SF1 GpuCachedTable, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-cached-table-always.log) $(grep -h 'results:' $out/$suite-sf1-cached-table-always.log)"
  left=$(( 575 - $(el) )); [ $left -lt 30 ] && { echo "no time for $suite table_cache"; continue; }
  timeout $left $cli bench $suite --sf 1 --iterations 1 --data /tmp/dfg-data --gpu-min-rows 0 --gpu-set gpu.placement=always --gpu-set gpu.table_cache=true --no-save > $out/$suite-sf1-table-cache-always.log 2>&1
  echo "$suite SF1 gpu.table_cache, every operator on the GPU: rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-sf1-table-cache-always.log) $(grep -h 'results:' $out/$suite-sf1-table-cache-always.log)"
done
grep -c "not supported on the GPU" $out/tpch-sf1-cached-table-always.log
grep -o "expression \`[^\`]*\` is not supported on the GPU" $out/*-sf1-cached-table-always.log | sort | uniq -c | head
cd $out && tar czf $OUT/t21.tar.gz .
# ===== call2/t22.sh
#!/usr/bin/env bash
# Session 9 call 2: the aggregate tests (substr, computed strings, scalar subqueries among the fused
# queries), then SF10 TPC-H and SSB over GpuCachedTable (--residency cached) beside DuckDB 2.0.1,
# each query's device time against its floor (scanned bytes at the measured device-copy rate).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o22; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 150 $lib --test-threads 2 aggregate:: expr:: fuse:: > $out/tests-aggregate.log 2>&1; echo "aggregate/expr/fuse tests rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests-aggregate.log | head -10
for suite in tpch ssb; do
  iters=$([ $suite = tpch ] && echo 5 || echo 3)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  left=$(( 560 - $(el) )); [ $left -lt 150 ] && { echo "no time for $suite"; continue; }
  timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout $(( 540 - $(el) )) $cli bench $suite --sf 10 --iterations $iters --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 590 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t22.tar.gz .
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached-table.json")[0]))["queries"]}
    except Exception as e:
        print(suite, "missing", e); continue
    r = []
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x floor {g.get('floor_ms') or 0:7.3f} {g.get('ok')}")
    print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
# ===== call3/t23.sh
#!/usr/bin/env bash
# Session 9 call 3: where the time of the GpuCachedTable queries goes, far above their floors:
# the debug timeline and EXPLAIN ANALYZE of TPC-H q1, q6, q2, q11 and SSB q1.1, q3.4 at SF10
# (--residency cached, 2 timed runs after the checked run that fills the cache).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o23; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 100 $cli bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench tpch --sf 10 --iterations 2 --queries 1,6,2,11 --data /tmp/dfg-data --residency cached --explain --no-save > $out/tpch-timeline.log 2>&1
echo "tpch timeline rc=$? at $(el) s"; grep -E "^q[0-9]+ " $out/tpch-timeline.log
timeout 100 $cli bench ssb --sf 10 --iterations 0 --queries 1.1 --data /tmp/dfg-data --no-save > $out/gen-ssb.log 2>&1
echo "ssb data at $(el) s"
RUST_LOG=datafusion_gpu::timeline=debug timeout 150 $cli bench ssb --sf 10 --iterations 2 --queries 1.1,3.4 --data /tmp/dfg-data --residency cached --explain --no-save > $out/ssb-timeline.log 2>&1
echo "ssb timeline rc=$? at $(el) s"; grep -E "^q[0-9.]+ " $out/ssb-timeline.log
cd $out && tar czf $OUT/t23.tar.gz .
# ===== call4/t24.sh
#!/usr/bin/env bash
# Session 9 call 4: warp-aggregated sums and counts: the aggregate tests (the differential tests of every
# key type and distribution), then SF10 TPC-H and SSB over GpuCachedTable (--residency cached) beside DuckDB 2.0.1,
# each query's device time against its floor (scanned bytes at the measured device-copy rate).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o24; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 150 $lib --test-threads 2 aggregate:: expr:: fuse:: > $out/tests-aggregate.log 2>&1; echo "aggregate/expr/fuse tests rc=$? at $(el) s"
grep -E "^test result|FAILED|panicked" $out/tests-aggregate.log | head -10
for suite in tpch ssb; do
  iters=$([ $suite = tpch ] && echo 5 || echo 3)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  left=$(( 560 - $(el) )); [ $left -lt 150 ] && { echo "no time for $suite"; continue; }
  timeout 100 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  timeout $(( 540 - $(el) )) $cli bench $suite --sf 10 --iterations $iters --data /tmp/dfg-data --residency cached --out $out/records --label cached-table > $out/$suite-cached-table.log 2>&1
  echo "$suite cached table rc=$? at $(el) s: $(grep -h 'total:' $out/$suite-cached-table.log) $(grep -h 'results:' $out/$suite-cached-table.log)"
  left=$(( 590 - $(el) )); [ $left -lt 20 ] && { echo "no time for duckdb $suite"; continue; }
  timeout $left python3 .device/duck.py $suite 10 /tmp/dfg-data crates/datafusion-gpu-bench/tpch/queries/$suite 5 $out/duckdb-$suite.json > $out/duckdb-$suite.log 2>&1
  echo "$suite duckdb rc=$? at $(el) s"
done
cd $out && tar czf $OUT/t24.tar.gz .
python3 - $out <<'PY'
import json, glob, math, sys
out = sys.argv[1]
for suite in ["tpch", "ssb"]:
    try:
        duck = {q["query"]: q for q in json.load(open(f"{out}/duckdb-{suite}.json"))["queries"]}
        gpu = {q["query"]: q for q in json.load(open(glob.glob(f"{out}/records/*-{suite}-sf10-cached-table.json")[0]))["queries"]}
    except Exception as e:
        print(suite, "missing", e); continue
    r = []
    for q, d in duck.items():
        g = gpu.get(q, {})
        if g.get("gpu_ms") and d.get("ms"):
            r.append(d["ms"] / g["gpu_ms"])
            print(f"  {q:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {d['ms']/g['gpu_ms']:6.2f}x floor {g.get('floor_ms') or 0:7.3f} {g.get('ok')}")
    print(f"  {suite} geomean {math.exp(sum(map(math.log, r))/len(r)):.2f}x over {len(r)}; slower: {sum(1 for x in r if x < 1)}; GPU total {sum(q.get('gpu_ms') or 0 for q in gpu.values()):.0f} ms, DuckDB {sum(q.get('ms') or 0 for q in duck.values()):.0f} ms")
PY
# ===== call5/t25.sh
#!/usr/bin/env bash
# Session 9 call 5: a same-machine A/B of warp-aggregated sums and counts (datafusion-gpu: with;
# datafusion-gpu-old: ee2b75f, without) on TPC-H q1, q6, q18 at SF10 over GpuCachedTable, two
# rounds in turn; then the whole GPU test suite on the library with them.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o25; rm -rf $out; mkdir -p $out /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
echo "ready at $(el) s"
timeout 100 /tmp/b/datafusion-gpu bench tpch --sf 10 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $out/gen-tpch.log 2>&1
echo "tpch data at $(el) s"
for round in 1 2; do
  for side in old new; do
    bin=/tmp/b/datafusion-gpu; [ $side = old ] && bin=/tmp/b/datafusion-gpu-old
    timeout 90 $bin bench tpch --sf 10 --iterations 5 --queries 1,6,18 --data /tmp/dfg-data --residency cached --no-save > $out/ab-$side-$round.log 2>&1
    echo "round $round $side rc=$? at $(el) s"; grep -E "^q(1|6|18) " $out/ab-$side-$round.log
  done
done
left=$(( 530 - $(el) ))
timeout $left $lib --test-threads 2 > $out/tests.log 2>&1; echo "GPU suite rc=$? at $(el) s (limit $left s)"
grep -E "^test result|FAILED|panicked" $out/tests.log | head -10
cd $out && tar czf $OUT/t25.tar.gz .
# ===== call6/t26.sh
#!/usr/bin/env bash
# Session 9 call 6: Nsight Compute's kernel durations for TPC-H q1 at SF1 over GpuCachedTable
# (ee2b75f's binary): which kernels take q1's device time.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
mkdir -p /tmp/b; xz -dc .device/res.tar.xz | tar xf - -C /tmp/b ./datafusion-gpu-old; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
cli=/tmp/b/datafusion-gpu-old
echo "ready at $(el) s"
timeout 40 $cli bench tpch --sf 1 --iterations 0 --queries 6 --data /tmp/dfg-data --no-save > $OUT/gen.log 2>&1; echo "data at $(el) s"
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw $cli bench tpch --sf 1 --iterations 1 --queries 1 --data /tmp/dfg-data --residency cached --no-save > $OUT/ncu-q1.csv 2> $OUT/ncu-q1.err
echo "ncu rc=$? at $(el) s"
python3 - $OUT/ncu-q1.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows: print("no rows"); sys.exit()
head = rows[0]; k = head.index("Kernel Name"); t = head.index("gpu__time_duration.sum")
tot = collections.Counter(); cnt = collections.Counter()
for r in rows[2:]:
    try: v = float(r[t].replace(",", ""))
    except ValueError: continue
    tot[r[k][:60]] += v; cnt[r[k][:60]] += 1
s = sum(tot.values())
print(f"{len(rows)-2} kernels, {s/1e6:.2f} ms in all (unit: {rows[1][t]})")
for name, v in tot.most_common(15): print(f"{v/1e6:8.3f} ms {cnt[name]:5d}x  {name}")
PY
