#!/usr/bin/env bash
# One device run: unpack the carried binaries (../shared/tools/device-pack --tests), run the GPU
# tests (optionally filtered), then each `datafusion-gpu` command of BENCH. Logs go to $OUT (or
# ./device-out); a short summary prints last.
#   usage: TESTS=<filter|skip> JOIN_TESTS=<run|skip> BENCH="bench join ...; bench aggregate ..." \
#          scripts/device-run.sh
set -uo pipefail
# Logs and results collect in a work folder, packed into one $OUT/run.tar.gz at the end (the
# device tool returns at most 8 files).
final=${OUT:-device-out}; out=/tmp/dfg-run; rm -rf "$out"; mkdir -p "$out" "$final"
source "$(dirname "$0")/device-env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/nvidia-smi.txt"
export XDG_CACHE_HOME=/tmp/dfg-cache
# A GPU test fails, rather than skips, when the device or NVRTC cannot be loaded here.
export DFG_REQUIRE_GPU=1
# Every carried test binary (`<crate or test target>-<hash>`): the library's, the bench crate's
# and its integration tests, the CLI's. The library's join differential tests run last, apart.
binaries=$(ls /tmp/b | grep -E '^[a-z_]+-[0-9a-f]{16}$')
t0=$(date +%s)
if [ "${TESTS:-}" != skip ]; then
    for tests in $binaries; do
        timeout "${TEST_TIMEOUT:-420}" "/tmp/b/$tests" --test-threads 4 --skip join::tests ${TESTS:-} > "$out/tests-$tests.log" 2>&1
        echo "tests ($tests) rc=$? in $(( $(date +%s) - t0 )) s"
    done
    if [ "${JOIN_TESTS:-run}" != skip ]; then
        for tests in $binaries; do
            "/tmp/b/$tests" --list 2>/dev/null | grep -q '^join::tests::' || continue
            timeout "${JOIN_TEST_TIMEOUT:-420}" "/tmp/b/$tests" --test-threads 2 join::tests ${TESTS:-} > "$out/tests-join.log" 2>&1
            echo "tests (join, $tests) rc=$? in $(( $(date +%s) - t0 )) s"
        done
    fi
fi
i=0
IFS=';' read -ra benches <<< "${BENCH:-}"
for b in "${benches[@]}"; do
    [ -n "${b// }" ] || continue
    i=$((i + 1)); t1=$(date +%s)
    timeout "${BENCH_TIMEOUT:-300}" datafusion-gpu $b > "$out/bench$i.log" 2> "$out/bench$i.err"
    echo "bench $i ($b) rc=$? in $(( $(date +%s) - t1 )) s"
done
for log in "$out"/tests-*.log; do
    [ -f "$log" ] || continue
    echo "== $(basename "$log")"
    grep -E '^test result|FAILED|panicked|differential:|compared' "$log" | head -30
    grep -E 'MISMATCH' "$log" | cut -c1-600 | head -25
done
for j in $(seq 1 $i); do
    echo "== bench $j"; tail -3 "$out/bench$j.err"; cat "$out/bench$j.log"
done
tar czf "$final/run.tar.gz" -C "$out" .
