//! Random tables for the differential fuzzer, and the SQL that recreates them in a repro.
//!
//! Each table has a key column `k` drawn from a small domain (skewed or uniform, so joins find
//! duplicates, misses and hot keys), a group column `g`, and a random mix of value columns of
//! every type the GPU path handles: integers, decimals up to 38 digits, strings, string views,
//! dictionaries, dates, timestamps, Booleans and floats with NaN and -0.0. Any column may hold
//! NULLs; a table may be empty or hold a single row.

use std::fmt::Write as _;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, StringViewArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Int32Type, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::Result;
use rand::Rng;
use rand::rngs::StdRng;

/// What a value column holds, as the query generator needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Decimal,
    Float,
    Text,
    Date,
    Timestamp,
    Bool,
}

/// One generated column: its name, type and kind.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub data_type: DataType,
    pub kind: Kind,
}

/// One generated table: its name, columns (`k` and `g` first) and rows in batches.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl Table {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// Value columns of `kind` (never `k` or `g`).
    pub fn of_kind(&self, kind: Kind) -> Vec<&Column> {
        self.columns[2..].iter().filter(|c| c.kind == kind).collect()
    }

    /// SQL that creates this table with the same types and rows in DataFusion: every cell as
    /// its text (or NULL), each column cast with `arrow_cast` to its type.
    pub fn create_sql(&self) -> Result<String> {
        let options = FormatOptions::default().with_null("NULL");
        let mut rows: Vec<Vec<String>> = Vec::new();
        for batch in &self.batches {
            let formatters = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            for r in 0..batch.num_rows() {
                rows.push(
                    batch
                        .columns()
                        .iter()
                        .zip(&formatters)
                        .map(|(c, f)| {
                            if c.is_null(r) {
                                "NULL".to_string()
                            } else {
                                format!("'{}'", f.value(r).to_string().replace('\'', "''"))
                            }
                        })
                        .collect(),
                );
            }
        }
        let empty = rows.is_empty();
        if empty {
            rows.push(vec!["NULL".to_string(); self.columns.len()]);
        }
        let mut sql = format!("CREATE TABLE {} AS SELECT ", self.name);
        for (i, c) in self.columns.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(sql, "{sep}arrow_cast(column{}, '{}') AS {}", i + 1, c.data_type, c.name);
        }
        sql.push_str(" FROM (VALUES ");
        for (i, row) in rows.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(sql, "{sep}({})", row.join(", "));
        }
        sql.push(')');
        if empty {
            sql.push_str(" WHERE false");
        }
        sql.push(';');
        Ok(sql)
    }
}

/// How big a table is: the fuzzer mixes empty, tiny and larger tables.
fn draw_rows(rng: &mut StdRng, max_rows: usize) -> usize {
    match rng.random_range(0..10) {
        0 => 0,
        1 => 1,
        2..=4 => rng.random_range(2..=20),
        _ => rng.random_range(20..=max_rows.max(21)),
    }
}

/// Draws a key from `0..domain`, skewed towards small keys when `skew`.
fn draw_key(rng: &mut StdRng, domain: i64, skew: bool) -> i64 {
    if skew && rng.random_bool(0.5) {
        // Half the rows on a few hot keys.
        rng.random_range(0..domain.clamp(1, 3))
    } else {
        rng.random_range(0..domain.max(1))
    }
}

fn nulls(rng: &mut StdRng, n: usize, fraction: f64) -> Vec<bool> {
    (0..n).map(|_| fraction > 0.0 && rng.random_bool(fraction)).collect()
}

const WORDS: [&str; 12] = ["", "a", "ab", "abc", "b", "ba", "xyz", "é", "aé b", "long words here", "%", "O'Neil"];

/// A random value column of `kind` with `n` rows, about `null_fraction` NULL.
fn value_column(rng: &mut StdRng, kind: Kind, n: usize, null_fraction: f64) -> (DataType, ArrayRef) {
    let is_null = nulls(rng, n, null_fraction);
    let pick = |i: usize| !is_null[i];
    match kind {
        Kind::Int => {
            let range = [10i64, 1000, 1 << 40][rng.random_range(0..3)];
            if rng.random_bool(0.5) {
                let v: Int64Array = (0..n).map(|i| pick(i).then(|| rng.random_range(-range..=range))).collect();
                (DataType::Int64, Arc::new(v))
            } else {
                let r = range.min(1 << 30) as i32;
                let v: Int32Array = (0..n).map(|i| pick(i).then(|| rng.random_range(-r..=r))).collect();
                (DataType::Int32, Arc::new(v))
            }
        }
        Kind::Decimal => {
            let (p, s) = [(12u8, 2i8), (15, 2), (38, 10), (38, 0), (20, 5)][rng.random_range(0..5)];
            // Mostly small magnitudes; sometimes near the precision's limit, so that products overflow.
            let digits = if rng.random_bool(0.2) { p as u32 } else { (p as u32).min(9) };
            let bound = 10i128.pow(digits) - 1;
            let v: Decimal128Array = (0..n).map(|i| pick(i).then(|| rng.random_range(-bound..=bound))).collect();
            let dt = DataType::Decimal128(p, s);
            (dt.clone(), Arc::new(v.with_data_type(dt)))
        }
        Kind::Float => {
            let v: Float64Array = (0..n)
                .map(|i| {
                    pick(i).then(|| match rng.random_range(0..12) {
                        0 => f64::NAN,
                        1 => -0.0,
                        2 => 0.0,
                        3 => f64::INFINITY,
                        _ => (rng.random_range(-1000..1000) as f64) / 4.0,
                    })
                })
                .collect();
            (DataType::Float64, Arc::new(v))
        }
        Kind::Text => {
            let words: Vec<Option<&str>> =
                (0..n).map(|i| pick(i).then(|| WORDS[rng.random_range(0..WORDS.len())])).collect();
            match rng.random_range(0..4) {
                0 => (DataType::Utf8View, Arc::new(StringViewArray::from(words))),
                1 => {
                    let dt = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
                    (dt, Arc::new(words.into_iter().collect::<DictionaryArray<Int32Type>>()))
                }
                2 => {
                    let dt = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
                    (dt, Arc::new(words.into_iter().collect::<DictionaryArray<Int8Type>>()))
                }
                _ => (DataType::Utf8, Arc::new(StringArray::from(words))),
            }
        }
        Kind::Date => {
            let v: Date32Array = (0..n).map(|i| pick(i).then(|| rng.random_range(-800..20_000))).collect();
            (DataType::Date32, Arc::new(v))
        }
        Kind::Timestamp => {
            let v: TimestampMicrosecondArray = (0..n)
                .map(|i| pick(i).then(|| rng.random_range(-1_000_000_000_000i64..2_000_000_000_000_000)))
                .collect();
            (DataType::Timestamp(TimeUnit::Microsecond, None), Arc::new(v))
        }
        Kind::Bool => {
            let v: BooleanArray = (0..n).map(|i| pick(i).then(|| rng.random_bool(0.5))).collect();
            (DataType::Boolean, Arc::new(v))
        }
    }
}

const KINDS: [Kind; 7] = [Kind::Int, Kind::Decimal, Kind::Float, Kind::Text, Kind::Date, Kind::Timestamp, Kind::Bool];

/// A random table named `name` of at most about `max_rows` rows whose keys come from
/// `0..key_domain`, in batches of at most `batch_rows` rows.
pub fn random_table(
    rng: &mut StdRng,
    name: &str,
    max_rows: usize,
    key_domain: i64,
    batch_rows: usize,
) -> Result<Table> {
    let n = draw_rows(rng, max_rows);
    let skew = rng.random_bool(0.4);
    let null_fraction = [0.0, 0.05, 0.3][rng.random_range(0..3)];
    let key_nulls = nulls(rng, n, null_fraction / 2.0);
    let k: Int64Array = (0..n).map(|i| (!key_nulls[i]).then(|| draw_key(rng, key_domain, skew))).collect();
    let groups = rng.random_range(1..=8i64);
    let g_nulls = nulls(rng, n, null_fraction);
    let g: Int32Array = (0..n).map(|i| (!g_nulls[i]).then(|| draw_key(rng, groups, skew) as i32)).collect();
    let mut columns = vec![
        Column { name: "k".into(), data_type: DataType::Int64, kind: Kind::Int },
        Column { name: "g".into(), data_type: DataType::Int32, kind: Kind::Int },
    ];
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(k), Arc::new(g)];
    // Every kind at least once, a few twice.
    let mut kinds: Vec<Kind> = KINDS.to_vec();
    for _ in 0..rng.random_range(0..4) {
        kinds.push(KINDS[rng.random_range(0..KINDS.len())]);
    }
    for (i, kind) in kinds.into_iter().enumerate() {
        let nf = if rng.random_bool(0.3) { 0.0 } else { null_fraction };
        let (dt, a) = value_column(rng, kind, n, nf);
        columns.push(Column { name: format!("c{i}"), data_type: dt, kind });
        arrays.push(a);
    }
    let schema = Arc::new(Schema::new(
        columns.iter().map(|c| Field::new(&c.name, c.data_type.clone(), true)).collect::<Vec<_>>(),
    ));
    let whole = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    let per = batch_rows.max(1);
    let batches = (0..n).step_by(per).map(|s| whole.slice(s, per.min(n - s))).collect();
    Ok(Table { name: name.to_string(), columns, schema, batches })
}
