#!/usr/bin/env bash
# Resident tables (issue 46, first step): the library tests (join differential tests aside), then
# TPC-H and SSB SF10 with the GPU session's tables pageable and resident in device memory, one
# after the other on this machine, every answer checked.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
out=/tmp/o5; rm -rf $out; mkdir -p $out/records /tmp/b
xz -dc .device/res.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/*
source scripts/device-env.sh >/dev/null 2>&1
export DFG_REQUIRE_GPU=1 XDG_CACHE_HOME=/tmp/dfg-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $out/nvidia-smi.txt
lib=/tmp/b/datafusion_gpu-3e361ff91f61c412; cli=/tmp/b/datafusion-gpu
echo "unpacked at $(el) s"
timeout 150 $lib --test-threads 4 --skip join::tests > $out/tests-lib.log 2>&1; echo "lib tests rc=$? at $(el) s" | tee $out/lib.rc
grep -E "resident|^test result|FAILED|panicked" $out/tests-lib.log | head -20
grep -h "ns of uploads" $out/tests-lib.log | sort | uniq | head -40 > $out/uploads.txt
for suite in tpch ssb; do
  it=$([ $suite = tpch ] && echo 2 || echo 1)
  q1=$([ $suite = tpch ] && echo 6 || echo 1.1)
  timeout 150 $cli bench $suite --sf 10 --iterations 0 --queries $q1 --data /tmp/dfg-data --no-save > $out/gen-$suite.log 2>&1
  echo "$suite data at $(el) s"
  for r in pageable gpu; do
    left=$(( 590 - $(el) )); [ $left -lt 30 ] && { echo "no time left for $suite $r"; continue; }
    timeout $left $cli bench $suite --sf 10 --iterations $it --data /tmp/dfg-data --residency $r \
      --out $out/records --label $r > $out/$suite-$r.log 2>&1
    echo "$suite $r rc=$? at $(el) s: $(grep -h 'host memory' $out/$suite-$r.log | head -1) $(grep -h 'total:' $out/$suite-$r.log) $(grep -h 'results:' $out/$suite-$r.log)"
  done
done
cd $out && tar czf $OUT/t5.tar.gz . ; cd - >/dev/null
for suite in tpch ssb; do
  echo "$suite GPU ms per query: pageable, gpu-resident"
  for q in $(grep -hoE '^q[0-9.]+ ' $out/$suite-pageable.log); do
    printf '%-6s' $q; for r in pageable gpu; do printf ' %8s' "$(grep -E "^$q " $out/$suite-$r.log | awk '{print $3}')"; done; echo
  done
done
