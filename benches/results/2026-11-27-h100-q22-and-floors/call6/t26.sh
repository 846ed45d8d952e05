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
