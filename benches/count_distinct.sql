-- COUNT(DISTINCT) with the GPU rule and on the CPU, in one process on the same in-memory table
-- (2^26 rows). Run: datafusion-gpu -f benches/count_distinct.sql; each query runs 4 times per
-- side (the first is warm-up; the result records the median of the other three).
CREATE TABLE t AS SELECT v % 1000 AS k1k, v % 1000000 AS k1m, (v * 7919) % 100003 AS x, v % 77 AS z, v AS y
  FROM (SELECT value AS v FROM generate_series(1, 67108864));
SET gpu.placement = 'always';
SET gpu.min_rows = 0;
-- gpu: 1000 groups, two distinct columns and a SUM
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
-- gpu: global
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
-- gpu: 10^6 groups
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
EXPLAIN ANALYZE SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SET gpu.enable = false;
-- cpu: 1000 groups, two distinct columns and a SUM
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
SELECT sum(dx), sum(dz), sum(s) FROM (SELECT k1k, count(DISTINCT x) dx, count(DISTINCT z) dz, sum(y) s FROM t GROUP BY k1k);
-- cpu: global
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
SELECT count(DISTINCT x), count(DISTINCT z) FROM t;
-- cpu: 10^6 groups
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
SELECT sum(dz), sum(dk) FROM (SELECT k1m, count(DISTINCT z) dz, count(DISTINCT k1k) dk FROM t GROUP BY k1m);
