#!/usr/bin/env bash
# The issue's reported cases through the CLI, each at several gpu.memory_limit values; prints one
# line per case and limit: ok (same answer as --no-gpu) or the GPU run's error.
cd /tmp
q() { # name, sql
  local name=$1 sql=$2
  want=$(datafusion-gpu --no-gpu --format csv --maxrows inf -q -c "$sql" 2>&1 | tail -n +1)
  for lim in ${LIMITS:-auto 1G 64M 8M}; do
    got=$(datafusion-gpu --format csv --maxrows inf -q -c "SET gpu.min_rows = 0; SET gpu.placement = 'always'; SET gpu.memory_limit = '$lim'; $sql" 2>&1)
    if [ "$(echo "$got" | sort)" == "$(echo "$want" | sort)" ]; then echo "ok   $name @ $lim"; else echo "FAIL $name @ $lim: $(diff <(echo "$want" | sort) <(echo "$got" | sort) | head -6 | cut -c1-300 | tr '\n' ' ')"; fi
  done
}
T="CREATE TABLE a AS SELECT value id, CASE WHEN value % 100 = 0 THEN value % 100 ELSE value % 200000 END fk FROM range(0, 2000000); CREATE TABLE b AS SELECT value id, CASE WHEN value % 100 = 0 THEN value % 100 ELSE value % 200000 END fk, value % 1000 v FROM range(0, 10000000);"
LIMITS=8M q skew-join-agg "$T SELECT a.fk % 100 g, count(*), sum(b.v) FROM a JOIN b ON a.fk = b.fk GROUP BY 1"
q skew-join-count "$T SELECT count(*), sum(b.v), max(a.id) FROM a JOIN b ON a.fk = b.fk"
