//! Random queries over the fuzzer's tables: filters (comparisons, AND/OR/NOT, IS NULL, IN,
//! LIKE and ILIKE with `%` and `_`, arithmetic that can overflow or wrap, CASE with and without a
//! base expression, CAST and TRY_CAST, `substr`, `date_part`), grouped and global aggregates
//! (COUNT, SUM, MIN, MAX, AVG, COUNT(DISTINCT), FILTER, HAVING), joins of every type on one or
//! two keys, three-way joins, IN / EXISTS subqueries (semi and anti joins, NOT IN's null rules),
//! scalar subqueries, DISTINCT, UNION and UNION ALL, window functions, CTEs, and ORDER BY with
//! LIMIT and OFFSET (whose answers are compared in order); and the writes run between queries
//! (`INSERT ... SELECT`, `DELETE`, `UPDATE`).

use rand::Rng;
use rand::rngs::StdRng;

use super::tables::{Kind, Table};

/// A generated query: its text, and whether its rows come in an order the comparison checks
/// (an `ORDER BY` over every output column, so that ties cannot reorder them).
#[derive(Debug, Clone)]
pub struct Query {
    pub sql: String,
    pub ordered: bool,
}

impl Query {
    fn unordered(sql: String) -> Query {
        Query { sql, ordered: false }
    }
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// A column of one of `kinds` of table `t`.
fn col_of(rng: &mut StdRng, t: &Table, alias: &str, kinds: &[Kind]) -> String {
    let kind = *pick(rng, kinds);
    col(rng, t, alias, kind)
}

/// A column of `kind` of table `t` as `alias.name` (the key when it has none).
fn col(rng: &mut StdRng, t: &Table, alias: &str, kind: Kind) -> String {
    let cols = t.of_kind(kind);
    match cols.is_empty() {
        true => format!("{alias}.k"),
        false => format!("{alias}.{}", pick(rng, &cols).name),
    }
}

/// A column of `kind` of table `t` with its type (`None` when it has none of that kind).
fn typed_col(rng: &mut StdRng, t: &Table, alias: &str, kind: Kind) -> Option<(String, String)> {
    let cols = t.of_kind(kind);
    (!cols.is_empty()).then(|| {
        let c = pick(rng, &cols);
        (format!("{alias}.{}", c.name), c.data_type.to_string())
    })
}

fn int_literal(rng: &mut StdRng) -> i64 {
    *pick(rng, &[0, 1, 2, 3, 5, -1, 10, 100, 500, -500, 1000])
}

/// A LIKE pattern of literal runs, `%` and `_`.
fn like_pattern(rng: &mut StdRng) -> String {
    let parts = ["%", "_", "a", "b", "é", "ab", " ", "O'", "%a%", "long"];
    let n = rng.random_range(1..=4);
    (0..n).map(|_| *pick(rng, &parts)).collect::<String>().replace('\'', "''")
}

/// A text value computed from a column of `t`.
fn text_expr(rng: &mut StdRng, t: &Table, a: &str) -> String {
    let s = col(rng, t, a, Kind::Text);
    match rng.random_range(0..5) {
        0 => format!("substr({s}, {}, {})", rng.random_range(1..4), rng.random_range(0..4)),
        1 => format!("substr({s}, {})", rng.random_range(1..4)),
        2 => format!("substring({s} from 1 for 2)"),
        _ => s,
    }
}

/// One comparison, test or match on a column of `t`.
fn atom(rng: &mut StdRng, t: &Table, a: &str) -> String {
    let op = *pick(rng, &["=", "<>", "<", "<=", ">", ">="]);
    match rng.random_range(0..26) {
        0 => format!("{a}.k {op} {}", rng.random_range(0..8)),
        1 => format!("{} {op} {}", col(rng, t, a, Kind::Int), int_literal(rng)),
        2 => format!("{} {op} {}", col(rng, t, a, Kind::Decimal), pick(rng, &["0", "12.5", "-3.25", "100000"])),
        3 => format!("{} {op} {}", col(rng, t, a, Kind::Float), pick(rng, &["0.0", "-0.0", "2.5", "'NaN'::double"])),
        4 => format!("{} {op} '{}'", text_expr(rng, t, a), pick(rng, &["ab", "", "b", "xyz", "é"])),
        5 => {
            let not = if rng.random_bool(0.3) { "NOT " } else { "" };
            let like = if rng.random_bool(0.2) { "ILIKE" } else { "LIKE" };
            format!("{} {not}{like} '{}'", col(rng, t, a, Kind::Text), like_pattern(rng))
        }
        6 => format!("{} {op} DATE '{}'", col(rng, t, a, Kind::Date), pick(rng, &["1970-01-01", "1995-06-30"])),
        7 => format!("{} {op} TIMESTAMP '2001-09-09 01:46:40'", col(rng, t, a, Kind::Timestamp)),
        8 => match rng.random_bool(0.5) {
            true => col(rng, t, a, Kind::Bool),
            false => format!("NOT {}", col(rng, t, a, Kind::Bool)),
        },
        9 => {
            let kind = *pick(rng, &[Kind::Int, Kind::Text, Kind::Decimal, Kind::Date, Kind::Float, Kind::Binary]);
            let not = if rng.random_bool(0.5) { "NOT " } else { "" };
            format!("{} IS {not}NULL", col(rng, t, a, kind))
        }
        10 => {
            let not = if rng.random_bool(0.4) { "NOT " } else { "" };
            let null = if rng.random_bool(0.2) { ", NULL" } else { "" };
            format!("{a}.k {not}IN (1, 2, 5{null})")
        }
        11 => {
            // Overflows only on rows of large magnitude: an error there must match the CPU's.
            let d = col(rng, t, a, Kind::Decimal);
            format!("{d} * {d} {op} 0")
        }
        12 => format!("{a}.g {op} {}", rng.random_range(0..4)),
        13 => format!("{} + {a}.g {op} {}", col(rng, t, a, Kind::Int), int_literal(rng)),
        14 => format!("{} * 2 - {a}.k {op} {}", col(rng, t, a, Kind::Int), int_literal(rng)),
        15 => {
            let d = col(rng, t, a, Kind::Decimal);
            format!("{d} + {d} {op} {}", pick(rng, &["0", "1.5", "-100"]))
        }
        16 => {
            // A cast that fails (or, TRY_CAST, gives NULL) past the target's precision.
            let d = col(rng, t, a, Kind::Decimal);
            let cast = if rng.random_bool(0.5) { "CAST" } else { "TRY_CAST" };
            format!("{cast}({d} AS DECIMAL({}, 2)) {op} 1.5", pick(rng, &[6, 10, 20]))
        }
        17 => format!("TRY_CAST({} AS BIGINT) {op} {}", col(rng, t, a, Kind::Text), int_literal(rng)),
        18 => format!("CAST({} AS BIGINT) {op} {}", col(rng, t, a, Kind::Int), int_literal(rng)),
        19 => {
            let part = *pick(rng, &["year", "month", "day"]);
            format!("date_part('{part}', {}) {op} {}", col(rng, t, a, Kind::Date), pick(rng, &[1, 6, 1995, 2020]))
        }
        20 => format!("EXTRACT(MONTH FROM {}) {op} 6", col(rng, t, a, Kind::Date)),
        21 => match typed_col(rng, t, a, Kind::Time) {
            Some((c, dt)) => format!("{c} {op} arrow_cast('12:00:00', '{dt}')"),
            None => format!("{a}.k {op} 1"),
        },
        22 => match typed_col(rng, t, a, Kind::Duration) {
            Some((c, dt)) => format!("{c} {op} arrow_cast(1000000, '{dt}')"),
            None => format!("{a}.k {op} 1"),
        },
        23 => format!("{} {op} X'3c'", col(rng, t, a, Kind::Binary)),
        24 => format!("{} {op} {}", case_expr(rng, t, a), int_literal(rng)),
        _ => format!("CAST({} AS DOUBLE) {op} 1.5", col(rng, t, a, Kind::Decimal)),
    }
}

/// A CASE over `t`: with a base expression (which may fail) or with conditions.
fn case_expr(rng: &mut StdRng, t: &Table, a: &str) -> String {
    match rng.random_range(0..4) {
        0 => format!("CASE {a}.g WHEN 1 THEN {a}.k WHEN 2 THEN 0 ELSE -{a}.k END"),
        1 => {
            let d = col(rng, t, a, Kind::Decimal);
            format!("CASE {d} * {d} WHEN 0 THEN 100 ELSE 1 END")
        }
        2 => {
            let d = col(rng, t, a, Kind::Decimal);
            format!("CASE CAST({d} AS DECIMAL(6, 2)) WHEN 0 THEN 1 WHEN 1.5 THEN 2 END")
        }
        _ => format!("CASE WHEN {} THEN {a}.g ELSE {a}.k END", predicate(rng, t, a, 1)),
    }
}

/// A predicate over `t` of up to `depth` levels of AND / OR / NOT.
pub fn predicate(rng: &mut StdRng, t: &Table, a: &str, depth: u32) -> String {
    if depth == 0 || rng.random_bool(0.4) {
        return atom(rng, t, a);
    }
    match rng.random_range(0..5) {
        0 | 1 => format!("({} AND {})", predicate(rng, t, a, depth - 1), predicate(rng, t, a, depth - 1)),
        2 | 3 => format!("({} OR {})", predicate(rng, t, a, depth - 1), predicate(rng, t, a, depth - 1)),
        _ => format!("NOT ({})", predicate(rng, t, a, depth - 1)),
    }
}

/// A numeric expression over `t` for SUM and AVG.
fn numeric(rng: &mut StdRng, t: &Table, a: &str) -> String {
    match rng.random_range(0..9) {
        0 => col(rng, t, a, Kind::Int),
        1 => col(rng, t, a, Kind::Decimal),
        2 => {
            let d = col(rng, t, a, Kind::Decimal);
            format!("{d} * {d}")
        }
        3 => format!("{} + {a}.k", col(rng, t, a, Kind::Int)),
        4 => format!("CASE WHEN {} THEN {} ELSE 0 END", predicate(rng, t, a, 1), col(rng, t, a, Kind::Decimal)),
        5 => col(rng, t, a, Kind::Float),
        6 => case_expr(rng, t, a),
        7 => format!("CAST({} AS DECIMAL(20, 2))", col(rng, t, a, Kind::Int)),
        _ => format!("{a}.k * {a}.g"),
    }
}

/// One aggregate over `t`.
fn aggregate(rng: &mut StdRng, t: &Table, a: &str) -> String {
    match rng.random_range(0..10) {
        0 => "COUNT(*)".to_string(),
        1 => format!("COUNT({})", col_of(rng, t, a, &[Kind::Int, Kind::Text, Kind::Date, Kind::Bool, Kind::Binary])),
        2 | 3 => format!("SUM({})", numeric(rng, t, a)),
        4 => format!("AVG({})", numeric(rng, t, a)),
        5 => format!("MIN({})", col_of(rng, t, a, &[Kind::Int, Kind::Decimal, Kind::Date, Kind::Text, Kind::Time])),
        6 => format!(
            "MAX({})",
            col_of(rng, t, a, &[Kind::Int, Kind::Decimal, Kind::Timestamp, Kind::Text, Kind::Duration])
        ),
        7 => format!("COUNT(DISTINCT {})", col_of(rng, t, a, &[Kind::Int, Kind::Text, Kind::Date])),
        8 => format!("MAX({})", text_expr(rng, t, a)),
        _ => format!("SUM({}) FILTER (WHERE {})", col(rng, t, a, Kind::Int), predicate(rng, t, a, 1)),
    }
}

/// One to four aggregates over `t`, named `{a}_x{i}` (two alike would clash unnamed).
fn aggregates(rng: &mut StdRng, t: &Table, a: &str) -> String {
    let n = rng.random_range(1..=4);
    (0..n).map(|i| format!("{} AS {a}_x{i}", aggregate(rng, t, a))).collect::<Vec<_>>().join(", ")
}

/// A group key of `t`.
fn group_key(rng: &mut StdRng, t: &Table, a: &str) -> String {
    match rng.random_range(0..9) {
        0 => format!("{a}.k"),
        1 => col(rng, t, a, Kind::Text),
        2 => col(rng, t, a, Kind::Date),
        3 => format!("{a}.g, {}", col(rng, t, a, Kind::Bool)),
        4 => col_of(rng, t, a, &[Kind::Timestamp, Kind::Binary, Kind::Time, Kind::Duration]),
        5 => format!("date_part('year', {})", col(rng, t, a, Kind::Date)),
        6 => format!("substr({}, 1, 1)", col(rng, t, a, Kind::Text)),
        _ => format!("{a}.g"),
    }
}

/// A join condition between `a` of `ta` and `b` of `tb`.
fn join_on(rng: &mut StdRng, ta: &Table, tb: &Table) -> String {
    match rng.random_range(0..9) {
        0 => "a.k = b.k AND a.g = b.g".to_string(),
        1 => format!("{} = {}", col(rng, ta, "a", Kind::Text), col(rng, tb, "b", Kind::Text)),
        2 => format!("a.k = b.k AND {}", predicate(rng, tb, "b", 1)),
        3 => format!("a.k = b.k AND {} < {}", col(rng, ta, "a", Kind::Int), col(rng, tb, "b", Kind::Int)),
        4 => "a.k = b.g".to_string(),
        5 => format!("a.k = b.k AND {} <> {}", col(rng, ta, "a", Kind::Decimal), col(rng, tb, "b", Kind::Decimal)),
        _ => "a.k = b.k".to_string(),
    }
}

/// A few output columns of `t` of every kind.
fn some_columns(rng: &mut StdRng, t: &Table, a: &str) -> Vec<String> {
    let mut out = vec![format!("{a}.k"), format!("{a}.g")];
    for _ in 0..rng.random_range(1..4) {
        let kind = *pick(
            rng,
            &[Kind::Int, Kind::Decimal, Kind::Text, Kind::Date, Kind::Timestamp, Kind::Bool, Kind::Binary, Kind::Time],
        );
        let c = col(rng, t, a, kind);
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// How many comma-separated items `list` holds, commas inside parentheses aside.
fn top_level_items(list: &str) -> usize {
    let mut depth = 0i32;
    1 + list
        .chars()
        .filter(|&c| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            c == ',' && depth == 0
        })
        .count()
}

/// One random query over `tables` (at least two).
pub fn query(rng: &mut StdRng, tables: &[Table]) -> Query {
    let ta = pick(rng, tables);
    let tb = pick(rng, tables);
    let which = rng.random_range(0..21);
    shape(rng, which, ta, tb, tables)
}

/// One random query over the large table `t` alone: no join, whose output over a table of a
/// million rows could be billions of rows.
pub fn single_table(rng: &mut StdRng, t: &Table) -> Query {
    let which = *pick(rng, &[0, 1, 2, 11, 12, 13, 14, 15, 16, 17, 19, 20]);
    shape(rng, which, t, t, std::slice::from_ref(t))
}

/// Query shape `which` over `ta` and `tb` (and `tables`, for a third).
fn shape(rng: &mut StdRng, which: u32, ta: &Table, tb: &Table, tables: &[Table]) -> Query {
    let (na, nb) = (&ta.name, &tb.name);
    let sql = match which {
        0 | 1 => {
            let g = group_key(rng, ta, "a");
            let w = predicate(rng, ta, "a", 2);
            format!("SELECT {g}, {} FROM {na} a WHERE {w} GROUP BY {g}", aggregates(rng, ta, "a"))
        }
        2 => format!("SELECT {} FROM {na} a WHERE {}", aggregates(rng, ta, "a"), predicate(rng, ta, "a", 2)),
        3..=5 => {
            let jt = *pick(rng, &["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "JOIN"]);
            let on = join_on(rng, ta, tb);
            let w = predicate(rng, ta, "a", 1);
            let aggs = format!("{}, {}", aggregates(rng, ta, "a"), aggregates(rng, tb, "b"));
            format!("SELECT a.g, {aggs} FROM {na} a {jt} {nb} b ON {on} WHERE {w} OR a.g IS NULL GROUP BY a.g")
        }
        6 => {
            let jt = *pick(rng, &["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
            let on = join_on(rng, ta, tb);
            let (ca, cb) = (col(rng, ta, "a", Kind::Decimal), col(rng, tb, "b", Kind::Text));
            let w = predicate(rng, tb, "b", 1);
            format!("SELECT a.k, a.g, {ca}, {cb} FROM {na} a {jt} {nb} b ON {on} WHERE {w}")
        }
        7 => {
            let not = if rng.random_bool(0.5) { "NOT " } else { "" };
            let w = predicate(rng, tb, "b", 1);
            format!(
                "SELECT a.g, {} FROM {na} a WHERE a.k {not}IN (SELECT b.k FROM {nb} b WHERE {w}) GROUP BY a.g",
                aggregates(rng, ta, "a")
            )
        }
        8 => {
            let not = if rng.random_bool(0.5) { "NOT " } else { "" };
            let w = predicate(rng, tb, "b", 1);
            format!(
                "SELECT a.g, COUNT(*) FROM {na} a WHERE {not}EXISTS (SELECT 1 FROM {nb} b WHERE b.k = a.k AND {w}) \
                 GROUP BY a.g"
            )
        }
        9 => {
            let (ia, ib) = (col(rng, ta, "a", Kind::Int), col(rng, tb, "b", Kind::Int));
            format!("SELECT COUNT(*), SUM({ia}) FROM {na} a WHERE {ia} > (SELECT AVG({ib}) FROM {nb} b)")
        }
        10 => {
            let tc = pick(rng, tables);
            let nc = &tc.name;
            let w = predicate(rng, tc, "c", 1);
            format!(
                "SELECT c.g, COUNT(*), SUM(a.k), MAX(b.g) FROM {na} a JOIN {nb} b ON a.k = b.k \
                 JOIN {nc} c ON b.g = c.g WHERE {w} GROUP BY c.g"
            )
        }
        11 => {
            let d = col(rng, ta, "a", Kind::Decimal);
            let p = predicate(rng, ta, "a", 1);
            let q = predicate(rng, ta, "a", 1);
            format!(
                "SELECT a.g, SUM(CASE WHEN {p} THEN 1 WHEN {q} THEN {d} * {d} ELSE {d} END) FROM {na} a \
                 WHERE {} GROUP BY a.g",
                predicate(rng, ta, "a", 2)
            )
        }
        12 | 13 => {
            // Rows in order: every output column sorted, so that the order is the only one.
            let cols = some_columns(rng, ta, "a");
            let dir = |rng: &mut StdRng| *pick(rng, &["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]);
            let order: Vec<String> = (1..=cols.len()).map(|i| format!("{i}{}", dir(rng))).collect();
            let limit = match rng.random_range(0..3) {
                0 => String::new(),
                1 => format!(" LIMIT {}", rng.random_range(0..20)),
                _ => format!(" LIMIT {} OFFSET {}", rng.random_range(1..20), rng.random_range(0..10)),
            };
            let sql = format!(
                "SELECT {} FROM {na} a WHERE {} ORDER BY {}{limit}",
                cols.join(", "),
                predicate(rng, ta, "a", 2),
                order.join(", ")
            );
            return Query { sql, ordered: true };
        }
        14 => {
            let cols = some_columns(rng, ta, "a");
            format!("SELECT DISTINCT {} FROM {na} a WHERE {}", cols[1..].join(", "), predicate(rng, ta, "a", 1))
        }
        15 => {
            let g = group_key(rng, ta, "a");
            let having = match rng.random_range(0..3) {
                0 => "COUNT(*) > 1".to_string(),
                1 => format!("SUM({}) > 0", col(rng, ta, "a", Kind::Int)),
                _ => format!("MIN({}) IS NOT NULL", col(rng, ta, "a", Kind::Decimal)),
            };
            format!("SELECT {g}, {} FROM {na} a GROUP BY {g} HAVING {having}", aggregates(rng, ta, "a"))
        }
        16 => {
            let all = if rng.random_bool(0.6) { " ALL" } else { "" };
            let (pa, pb) = (predicate(rng, ta, "a", 1), predicate(rng, tb, "b", 1));
            let inner =
                format!("SELECT a.k, a.g FROM {na} a WHERE {pa} UNION{all} SELECT b.k, b.g FROM {nb} b WHERE {pb}");
            match rng.random_bool(0.5) {
                true => format!("SELECT g, COUNT(*), SUM(k) FROM ({inner}) u GROUP BY g"),
                false => inner,
            }
        }
        17 => {
            let f = *pick(rng, &["rank()", "dense_rank()", "COUNT(*)", "SUM(a.k)", "MIN(a.k)", "MAX(a.g)"]);
            let over = match rng.random_range(0..3) {
                0 => "PARTITION BY a.g ORDER BY a.k".to_string(),
                1 => "PARTITION BY a.g".to_string(),
                _ => format!("ORDER BY {}", col(rng, ta, "a", Kind::Int)),
            };
            format!("SELECT a.k, a.g, {f} OVER ({over}) AS w FROM {na} a WHERE {}", predicate(rng, ta, "a", 1))
        }
        18 => {
            let w = predicate(rng, ta, "a", 1);
            format!(
                "WITH c AS (SELECT a.k AS k, {} AS s FROM {na} a WHERE {w}) \
                 SELECT b.g, COUNT(*), SUM(c.s) FROM c JOIN {nb} b ON c.k = b.k GROUP BY b.g",
                numeric(rng, ta, "a")
            )
        }
        19 => {
            let exprs = [case_expr(rng, ta, "a"), text_expr(rng, ta, "a"), numeric(rng, ta, "a")];
            format!("SELECT a.k, {} FROM {na} a WHERE {}", exprs.join(", "), predicate(rng, ta, "a", 1))
        }
        _ => {
            // The groups with the most rows: ordered by the count, then by every group column
            // (each group's are its own), so that the limit keeps one set of rows.
            let g = group_key(rng, ta, "a");
            let keys = top_level_items(&g);
            let order: Vec<String> =
                std::iter::once(format!("{} DESC", keys + 1)).chain((1..=keys).map(|i| i.to_string())).collect();
            let sql = format!(
                "SELECT {g}, COUNT(*) AS n FROM {na} a WHERE {} GROUP BY {g} ORDER BY {} LIMIT 3",
                predicate(rng, ta, "a", 1),
                order.join(", ")
            );
            return Query { sql, ordered: true };
        }
    };
    Query::unordered(sql)
}

/// A query over the large table `t` alone that hands out many of its rows (past what the GPU
/// plan's root holds back before its answer is final).
pub fn large_output(rng: &mut StdRng, t: &Table) -> Query {
    let w = predicate(rng, t, "a", 1);
    Query::unordered(format!("SELECT * FROM {} a WHERE {w} OR a.k >= 0", t.name))
}

/// A write to table `t` (of `tables`), run on both sides between queries.
pub fn write(rng: &mut StdRng, t: &Table) -> String {
    let n = &t.name;
    match rng.random_range(0..4) {
        0 => format!("INSERT INTO {n} SELECT * FROM {n} a WHERE {}", predicate(rng, t, "a", 1)),
        1 => format!("DELETE FROM {n} WHERE {}", predicate(rng, t, n, 1)),
        2 => format!("UPDATE {n} SET g = g + 1 WHERE {}", predicate(rng, t, n, 1)),
        _ => {
            let c = col(rng, t, n, Kind::Int);
            let c = c.rsplit('.').next().unwrap_or("k").to_string();
            format!("UPDATE {n} SET {c} = {c} - 1 WHERE {}", predicate(rng, t, n, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::top_level_items;

    #[test]
    fn top_level_items_skip_commas_in_calls() {
        assert_eq!(top_level_items("a.g"), 1);
        assert_eq!(top_level_items("a.g, a.c3"), 2);
        assert_eq!(top_level_items("substr(a.c3, 1, 1)"), 1);
        assert_eq!(top_level_items("date_part('year', a.c4), a.g"), 2);
    }
}
