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
