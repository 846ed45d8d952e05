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
