# ===== cases.sh
#!/usr/bin/env bash
# The issue's reported cases through the CLI, each at several gpu.memory_limit values; prints one
# line per case and limit: ok (same answer as --no-gpu) or the GPU run's error.
cd /tmp
q() { # name, sql
  local name=$1 sql=$2
  want=$(datafusion-gpu --no-gpu --format csv --maxrows inf -q -c "$sql" 2>&1 | tail -n +1)
  for lim in auto 1G 64M 8M; do
    got=$(datafusion-gpu --format csv --maxrows inf -q -c "SET gpu.min_rows = 0; SET gpu.placement = 'always'; SET gpu.memory_limit = '$lim'; $sql" 2>&1)
    if [ "$(echo "$got" | sort)" == "$(echo "$want" | sort)" ]; then echo "ok   $name @ $lim"; else echo "FAIL $name @ $lim: $(diff <(echo "$want" | sort) <(echo "$got" | sort) | head -6 | cut -c1-300 | tr '\n' ' ')"; fi
  done
}
q groupby-20M "SELECT count(*), sum(c) FROM (SELECT value % 20000000 g, count(*) c FROM range(0, 40000000) GROUP BY 1)"
q short-and "SELECT count(*) FROM (SELECT value k, arrow_cast(CASE WHEN value >= 100000 THEN 100000000000000000000 ELSE value END, 'Decimal128(38, 0)') d FROM range(0, 200000)) WHERE k < 1000 AND d * d > 0"
q short-case "SELECT sum(CASE WHEN k >= 100000 THEN 0 WHEN d * d > 0 THEN 1 ELSE 2 END) FROM (SELECT value k, arrow_cast(CASE WHEN value >= 100000 THEN 100000000000000000000 ELSE value END, 'Decimal128(38, 0)') d FROM range(0, 200000))"
q short-join "SELECT count(*) FROM (SELECT value k, arrow_cast(CASE WHEN value >= 100000 THEN 100000000000000000000 ELSE value END, 'Decimal128(38, 0)') d FROM range(0, 200000)) a JOIN (SELECT value k FROM range(0, 200000)) b ON a.k = b.k AND (a.k < 1000 AND a.d * a.d > 0)"
q self-join "SELECT count(*), sum(a.value) FROM range(0, 3000000) a JOIN range(0, 3000000) b ON a.value = b.value"
q dict-int8 "SELECT count(*) FROM (SELECT s, count(*) FROM (SELECT arrow_cast(arrow_cast(value % 300, 'Utf8'), 'Dictionary(Int8, Utf8)') s FROM range(0, 100) UNION ALL SELECT arrow_cast(arrow_cast(value % 300 + 100, 'Utf8'), 'Dictionary(Int8, Utf8)') s FROM range(100, 200) UNION ALL SELECT arrow_cast(arrow_cast(value % 300 + 200, 'Utf8'), 'Dictionary(Int8, Utf8)') s FROM range(200, 300)) GROUP BY s)"
# Many-to-many joins of skewed keys feeding aggregates (the issue's first report, scaled down).
T="CREATE TABLE a AS SELECT value id, CASE WHEN value % 100 = 0 THEN value % 100 ELSE value % 200000 END fk FROM range(0, 2000000); CREATE TABLE b AS SELECT value id, CASE WHEN value % 100 = 0 THEN value % 100 ELSE value % 200000 END fk, value % 1000 v FROM range(0, 10000000);"
q skew-join-agg "$T SELECT a.fk % 100 g, count(*), sum(b.v) FROM a JOIN b ON a.fk = b.fk GROUP BY 1"
q skew-join-count "$T SELECT count(*), sum(b.v), max(a.id) FROM a JOIN b ON a.fk = b.fk"
# ===== run.sh
#!/usr/bin/env bash
# One device call of the reliability record (issue 44), run from the repository root with the CLI
# carried in .device (scripts/device-env.sh unpacks it). STEPS picks what runs:
#   cases        the issue's cases at gpu.memory_limit auto, 1G, 64M and 8M (cases.sh)
#   fuzz         FUZZ_JOBS processes of `fuzz`, FUZZ_QUERIES queries each, seeds FUZZ_SEED0..
#   sf1          TPC-H and SSB SF1, every eligible operator on the GPU, answers checked
#   concurrency  `bench concurrency`: 8 TPC-H SF1 streams at once, sessions with different limits
# Logs go to $OUT; a summary prints last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/dfg-out}; mkdir -p "$out"
source scripts/device-env.sh >/dev/null
export XDG_CACHE_HOME=/tmp/dfg-cache DFG_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/nvidia-smi.txt"
summary=()
for step in ${STEPS:-cases fuzz sf1 concurrency}; do
    t0=$(date +%s)
    case $step in
        cases) timeout 400 bash "$here/cases.sh" > "$out/cases.log" 2>&1; rc=$?
               summary+=("cases rc=$rc $(grep -c '^ok' "$out/cases.log") ok, $(grep -c '^FAIL' "$out/cases.log") failed") ;;
        fuzz)
            jobs=${FUZZ_JOBS:-8}; n=${FUZZ_QUERIES:-1250}; s0=${FUZZ_SEED0:-101}
            for j in $(seq 0 $((jobs - 1))); do
                timeout ${FUZZ_TIMEOUT:-480} datafusion-gpu fuzz --queries "$n" --seed $((s0 + j)) --repro-dir "$out/repros" \
                    > "$out/fuzz-seed$((s0 + j)).log" 2>&1 &
            done
            wait
            summary+=("fuzz: $(grep -h '^seed ' "$out"/fuzz-seed*.log | tr '\n' ' ')") ;;
        sf1)
            datafusion-gpu bench tpch --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > "$out/tpch-sf1-always.log" 2>&1; a=$?
            datafusion-gpu bench ssb --sf 1 --iterations 0 --gpu-min-rows 0 --gpu-set gpu.placement=always --no-save > "$out/ssb-sf1-always.log" 2>&1; b=$?
            summary+=("sf1 tpch rc=$a: $(grep 'results:' "$out/tpch-sf1-always.log") | ssb rc=$b: $(grep 'results:' "$out/ssb-sf1-always.log")") ;;
        concurrency)
            timeout 400 datafusion-gpu bench concurrency --streams 8 --sf 1 --memory-limits auto,4G,1G,256M \
                > "$out/concurrency-cost.log" 2>&1; a=$?
            timeout 400 datafusion-gpu bench concurrency --streams 8 --sf 1 --memory-limits auto,1G,256M,64M \
                --gpu-set gpu.min_rows=0 --gpu-set gpu.placement=always > "$out/concurrency-always.log" 2>&1; b=$?
            summary+=("concurrency rc=$a/$b: $(grep 'all streams' "$out"/concurrency-*.log | tr '\n' ' ')") ;;
    esac
    summary+=("  ($step: $(( $(date +%s) - t0 )) s)")
done
[ -d "$out/repros" ] && tar czf "$out/repros.tar.gz" -C "$out" repros && rm -rf "$out/repros"
echo "== cases"; cat "$out/cases.log" 2>/dev/null | cut -c1-400
for f in "$out"/fuzz-seed*.log; do [ -e "$f" ] && grep -h -A3 '^FAILED' "$f" | cut -c1-500 | head -12; done
echo "== summary"; printf '%s\n' "${summary[@]}"
