#!/usr/bin/env bash
# A same-machine A/B of two CLI builds on a GPU machine: A B A B runs of `bench SUITE --sf SF`
# over the same Parquet data, each build with a kernel cache of its own (an old build may load a
# newer build's cache files as modules). The builds come xz-compressed in .device/bisect/
# (datafusion-gpu-<A>.xz, datafusion-gpu-<B>.xz); to carry two with the repository, move
# benches/results/ out of the working tree for the call.
#   usage: scripts/device-ab.sh A B [SUITE=tpch] [QUERIES=17,18] [SF=10] [ITERATIONS=5]
# Logs go to $OUT (or /tmp/dfg-ab); per-query GPU medians of each run print last.
set -uo pipefail
a=$1 b=$2 suite=${3:-tpch} queries=${4:-17,18} sf=${5:-10} it=${6:-5}
out=${OUT:-/tmp/dfg-ab}; mkdir -p "$out" /tmp/b
export DFG_REQUIRE_GPU=1
for v in "$a" "$b"; do
    if [ ! -x "/tmp/b/dfg-$v" ]; then
        xz -dc ".device/bisect/datafusion-gpu-$v.xz" > "/tmp/b/dfg-$v" && chmod +x "/tmp/b/dfg-$v"
    fi
done
source "$(dirname "$0")/device-env.sh" >/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/nvidia-smi.txt"
# The data, written once (a checked run of one query).
XDG_CACHE_HOME=/tmp/dfg-cache-$b "/tmp/b/dfg-$b" bench "$suite" --sf "$sf" --iterations 0 --queries "${queries%%,*}" \
    --data /tmp/dfg-data --no-save > "$out/data.log" 2>&1
n=0
for v in "$a" "$b" "$a" "$b"; do
    n=$((n + 1))
    XDG_CACHE_HOME=/tmp/dfg-cache-$v timeout "${RUN_TIMEOUT:-240}" "/tmp/b/dfg-$v" bench "$suite" --sf "$sf" \
        --queries "$queries" --iterations "$it" --data /tmp/dfg-data --no-save > "$out/run$n-$v.log" 2>&1
    echo "run $n ($v) rc=$?: $(grep -h 'results:' "$out/run$n-$v.log")"
done
echo "GPU ms per query (medians of $it), runs 1-4:"
for q in $(grep -hoE '^q[0-9.]+ ' "$out/run1-$a.log"); do
    printf '%-6s' "$q"
    for n in 1 2 3 4; do
        v=$([ $((n % 2)) = 1 ] && echo "$a" || echo "$b")
        printf ' %10s' "$(grep -E "^$q " "$out/run$n-$v.log" | awk '{print $3}')"
    done
    echo "   ($a $b $a $b)"
done
