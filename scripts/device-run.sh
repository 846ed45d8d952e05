#!/usr/bin/env bash
# One device run for the join work: unpack the carried binaries (../shared/tools/device-pack
# --tests), run the GPU tests (optionally filtered), then `datafusion-gpu bench join` with the
# given arguments. Logs go to $OUT (or ./device-out); a short summary prints last.
#   usage: TESTS=<filter|skip> BENCH="<bench join args>|skip" scripts/device-join.sh
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
source "$(dirname "$0")/device-env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/nvidia-smi.txt"
export XDG_CACHE_HOME=/tmp/dfg-cache
tests=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]+$' | head -1)
t0=$(date +%s)
if [ "${TESTS:-}" != skip ]; then
    # Everything but the join differential tests first (quick), then those.
    timeout 180 "/tmp/b/$tests" --test-threads 4 --skip join::tests ${TESTS:-} > "$out/tests.log" 2>&1
    echo "tests (other) rc=$? in $(( $(date +%s) - t0 )) s"
    timeout "${TEST_TIMEOUT:-420}" "/tmp/b/$tests" --test-threads 2 join::tests ${TESTS:-} > "$out/tests-join.log" 2>&1
    echo "tests (join) rc=$? in $(( $(date +%s) - t0 )) s"
fi
t1=$(date +%s)
if [ "${BENCH:-skip}" != skip ]; then
    timeout "${BENCH_TIMEOUT:-300}" datafusion-gpu bench join ${BENCH} > "$out/bench.log" 2> "$out/bench.err"
    echo "bench rc=$? in $(( $(date +%s) - t1 )) s"
fi
for log in "$out/tests.log" "$out/tests-join.log"; do
    [ -f "$log" ] || continue
    echo "== $(basename "$log")"
    grep -E '^test result|FAILED|panicked|differential:' "$log" | head -30
    grep -E 'JOIN MISMATCH' "$log" | cut -c1-600 | head -25
done
if [ -f "$out/bench.log" ]; then
    echo "== bench"; tail -3 "$out/bench.err"; cat "$out/bench.log"
fi
