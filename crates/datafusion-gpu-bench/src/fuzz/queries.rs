//! Random queries over the fuzzer's tables: filters (comparisons, AND/OR/NOT, IS NULL, IN,
//! LIKE, decimal arithmetic that can overflow, CASE), grouped and global aggregates (COUNT, SUM,
//! MIN, MAX, AVG, COUNT(DISTINCT)), joins of every type on one or two keys, three-way joins,
//! IN / EXISTS subqueries (semi and anti joins, NOT IN's null rules) and scalar subqueries.

use rand::Rng;
use rand::rngs::StdRng;

use super::tables::{Kind, Table};

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

fn int_literal(rng: &mut StdRng) -> i64 {
    *pick(rng, &[0, 1, 2, 3, 5, -1, 10, 100, 500, -500, 1000])
}

/// One comparison, test or match on a column of `t`.
fn atom(rng: &mut StdRng, t: &Table, a: &str) -> String {
    let op = *pick(rng, &["=", "<>", "<", "<=", ">", ">="]);
    match rng.random_range(0..14) {
        0 => format!("{a}.k {op} {}", rng.random_range(0..8)),
        1 => format!("{} {op} {}", col(rng, t, a, Kind::Int), int_literal(rng)),
        2 => format!("{} {op} {}", col(rng, t, a, Kind::Decimal), pick(rng, &["0", "12.5", "-3.25", "100000"])),
        3 => format!("{} {op} {}", col(rng, t, a, Kind::Float), pick(rng, &["0.0", "-0.0", "2.5", "'NaN'::double"])),
        4 => format!("{} {op} '{}'", col(rng, t, a, Kind::Text), pick(rng, &["ab", "", "b", "xyz", "é"])),
        5 => {
            let not = if rng.random_bool(0.3) { "NOT " } else { "" };
            format!("{} {not}LIKE '{}'", col(rng, t, a, Kind::Text), pick(rng, &["%a%", "a%", "%b", "%", "ab"]))
        }
        6 => format!("{} {op} DATE '{}'", col(rng, t, a, Kind::Date), pick(rng, &["1970-01-01", "1995-06-30"])),
        7 => format!("{} {op} TIMESTAMP '2001-09-09 01:46:40'", col(rng, t, a, Kind::Timestamp)),
        8 => match rng.random_bool(0.5) {
            true => col(rng, t, a, Kind::Bool),
            false => format!("NOT {}", col(rng, t, a, Kind::Bool)),
        },
        9 => {
            let kind = *pick(rng, &[Kind::Int, Kind::Text, Kind::Decimal, Kind::Date, Kind::Float]);
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
        _ => format!("{} + {a}.g {op} {}", col(rng, t, a, Kind::Int), int_literal(rng)),
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
    match rng.random_range(0..7) {
        0 => col(rng, t, a, Kind::Int),
        1 => col(rng, t, a, Kind::Decimal),
        2 => {
            let d = col(rng, t, a, Kind::Decimal);
            format!("{d} * {d}")
        }
        3 => format!("{} + {a}.k", col(rng, t, a, Kind::Int)),
        4 => format!("CASE WHEN {} THEN {} ELSE 0 END", predicate(rng, t, a, 1), col(rng, t, a, Kind::Decimal)),
        5 => col(rng, t, a, Kind::Float),
        _ => format!("{a}.k * {a}.g"),
    }
}

/// One aggregate over `t`.
fn aggregate(rng: &mut StdRng, t: &Table, a: &str) -> String {
    match rng.random_range(0..9) {
        0 => "COUNT(*)".to_string(),
        1 => format!("COUNT({})", col_of(rng, t, a, &[Kind::Int, Kind::Text, Kind::Date, Kind::Bool])),
        2 | 3 => format!("SUM({})", numeric(rng, t, a)),
        4 => format!("AVG({})", numeric(rng, t, a)),
        5 => format!("MIN({})", col_of(rng, t, a, &[Kind::Int, Kind::Decimal, Kind::Date, Kind::Text])),
        6 => format!("MAX({})", col_of(rng, t, a, &[Kind::Int, Kind::Decimal, Kind::Timestamp, Kind::Text])),
        7 => format!("COUNT(DISTINCT {})", col_of(rng, t, a, &[Kind::Int, Kind::Text, Kind::Date])),
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
    match rng.random_range(0..6) {
        0 => format!("{a}.k"),
        1 => col(rng, t, a, Kind::Text),
        2 => col(rng, t, a, Kind::Date),
        3 => format!("{a}.g, {}", col(rng, t, a, Kind::Bool)),
        _ => format!("{a}.g"),
    }
}

/// A join condition between `a` of `ta` and `b` of `tb`.
fn join_on(rng: &mut StdRng, ta: &Table, tb: &Table) -> String {
    match rng.random_range(0..8) {
        0 => "a.k = b.k AND a.g = b.g".to_string(),
        1 => format!("{} = {}", col(rng, ta, "a", Kind::Text), col(rng, tb, "b", Kind::Text)),
        2 => format!("a.k = b.k AND {}", predicate(rng, tb, "b", 1)),
        3 => format!("a.k = b.k AND {} < {}", col(rng, ta, "a", Kind::Int), col(rng, tb, "b", Kind::Int)),
        4 => format!("a.k = b.g"),
        _ => "a.k = b.k".to_string(),
    }
}

/// One random query over `tables` (at least two).
pub fn query(rng: &mut StdRng, tables: &[Table]) -> String {
    let ta = pick(rng, tables);
    let tb = pick(rng, tables);
    let (na, nb) = (&ta.name, &tb.name);
    match rng.random_range(0..12) {
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
        _ => {
            let d = col(rng, ta, "a", Kind::Decimal);
            let p = predicate(rng, ta, "a", 1);
            let q = predicate(rng, ta, "a", 1);
            format!(
                "SELECT a.g, SUM(CASE WHEN {p} THEN 1 WHEN {q} THEN {d} * {d} ELSE {d} END) FROM {na} a \
                 WHERE {} GROUP BY a.g",
                predicate(rng, ta, "a", 2)
            )
        }
    }
}
