//! Random tables for the differential fuzzer, and the SQL that recreates them in a repro.
//!
//! Each table has a key column `k` drawn from a small domain (skewed or uniform, so joins find
//! duplicates, misses and hot keys), a group column `g`, and a random mix of value columns of
//! every type the GPU path handles: signed and unsigned integers of every width (some near their
//! limits, so that sums wrap), decimals up to 38 digits, Float64 and Float32 with NaN and -0.0,
//! strings (Utf8, LargeUtf8, views, dictionaries; multi-byte characters and values over 255
//! bytes), binary of three layouts, Date32 and Date64, timestamps with and without time zones,
//! times, durations and Booleans. Any column may hold NULLs; a table may be empty, hold a single
//! row, or (a large table) over a million rows.

use std::fmt::Write as _;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Date32Array, Date64Array, Decimal128Array,
    DictionaryArray, DurationMicrosecondArray, DurationMillisecondArray, Float32Array, Float64Array, Int8Array,
    Int16Array, Int32Array, Int64Array, LargeBinaryArray, LargeStringArray, RecordBatch, StringArray, StringViewArray,
    Time32MillisecondArray, Time64MicrosecondArray, TimestampMicrosecondArray, TimestampMillisecondArray,
    TimestampNanosecondArray, TimestampSecondArray, UInt8Array, UInt16Array, UInt32Array, UInt64Array,
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
    Binary,
    Time,
    Duration,
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
    /// its text (or NULL), each column cast with `arrow_cast` to its type (binary values as hex,
    /// durations as their counts).
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
                                format!("'{}'", cell_text(c.as_ref(), r, &f.value(r).to_string()).replace('\'', "''"))
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
            let value = match &c.data_type {
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                    format!("decode(column{}, 'hex')", i + 1)
                }
                DataType::Duration(_) => format!("arrow_cast(column{}, 'Int64')", i + 1),
                _ => format!("column{}", i + 1),
            };
            let _ = write!(sql, "{sep}arrow_cast({value}, '{}') AS {}", c.data_type, c.name);
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

/// The text of row `r` of `array` that its `arrow_cast` in [`Table::create_sql`] reads back:
/// `shown` (the array's display), hex for binary values, the count of a duration.
fn cell_text(array: &dyn Array, r: usize, shown: &str) -> String {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{DurationMicrosecondType, DurationMillisecondType};
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match array.data_type() {
        DataType::Binary => hex(array.as_binary::<i32>().value(r)),
        DataType::LargeBinary => hex(array.as_binary::<i64>().value(r)),
        DataType::BinaryView => hex(array.as_binary_view().value(r)),
        DataType::Duration(TimeUnit::Millisecond) => {
            array.as_primitive::<DurationMillisecondType>().value(r).to_string()
        }
        DataType::Duration(TimeUnit::Microsecond) => {
            array.as_primitive::<DurationMicrosecondType>().value(r).to_string()
        }
        _ => shown.to_string(),
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

const WORDS: [&str; 14] =
    ["", "a", "ab", "abc", "b", "ba", "xyz", "é", "aé b", "long words here", "%", "O'Neil", "a_b", "Ab"];

/// A string of over 255 bytes, multi-byte characters among them, different for each `i`.
fn long_word(i: usize) -> String {
    let mut s = format!("long{i}-");
    while s.len() < 300 {
        s.push_str("éa b ");
    }
    s
}

/// A random value column of `kind` with `n` rows, about `null_fraction` NULL.
fn value_column(rng: &mut StdRng, kind: Kind, n: usize, null_fraction: f64) -> (DataType, ArrayRef) {
    let is_null = nulls(rng, n, null_fraction);
    let pick = |i: usize| !is_null[i];
    match kind {
        Kind::Int => {
            let range = [10i64, 1000, 1 << 40][rng.random_range(0..3)];
            // Sometimes values near the type's limits, so that sums and products wrap.
            let near_limit = rng.random_bool(0.15);
            let ints = |rng: &mut StdRng, lo: i64, hi: i64| -> Vec<Option<i64>> {
                let (lo, hi) = if near_limit { (hi - hi / 8, hi) } else { (lo.max(-range), hi.min(range)) };
                (0..n).map(|i| pick(i).then(|| rng.random_range(lo..=hi))).collect()
            };
            match rng.random_range(0..10) {
                0..=2 => {
                    let v = ints(rng, i64::MIN, i64::MAX);
                    (DataType::Int64, Arc::new(Int64Array::from(v)))
                }
                3..=4 => {
                    let v = ints(rng, i32::MIN as i64, i32::MAX as i64);
                    (DataType::Int32, Arc::new(v.into_iter().map(|x| x.map(|x| x as i32)).collect::<Int32Array>()))
                }
                5 => {
                    let v = ints(rng, i16::MIN as i64, i16::MAX as i64);
                    (DataType::Int16, Arc::new(v.into_iter().map(|x| x.map(|x| x as i16)).collect::<Int16Array>()))
                }
                6 => {
                    let v = ints(rng, i8::MIN as i64, i8::MAX as i64);
                    (DataType::Int8, Arc::new(v.into_iter().map(|x| x.map(|x| x as i8)).collect::<Int8Array>()))
                }
                7 => {
                    let v = ints(rng, 0, u8::MAX as i64);
                    (DataType::UInt8, Arc::new(v.into_iter().map(|x| x.map(|x| x as u8)).collect::<UInt8Array>()))
                }
                8 => {
                    let v = ints(rng, 0, u16::MAX as i64);
                    (DataType::UInt16, Arc::new(v.into_iter().map(|x| x.map(|x| x as u16)).collect::<UInt16Array>()))
                }
                _ => match rng.random_bool(0.5) {
                    true => {
                        let v = ints(rng, 0, u32::MAX as i64);
                        (
                            DataType::UInt32,
                            Arc::new(v.into_iter().map(|x| x.map(|x| x as u32)).collect::<UInt32Array>()),
                        )
                    }
                    false => {
                        let v = ints(rng, 0, i64::MAX);
                        let v: UInt64Array = v
                            .into_iter()
                            .map(|x| x.map(|x| if near_limit { x as u64 * 2 } else { x as u64 }))
                            .collect();
                        (DataType::UInt64, Arc::new(v))
                    }
                },
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
            let v: Vec<Option<f64>> = (0..n)
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
            match rng.random_bool(0.25) {
                true => {
                    (DataType::Float32, Arc::new(v.into_iter().map(|x| x.map(|x| x as f32)).collect::<Float32Array>()))
                }
                false => (DataType::Float64, Arc::new(Float64Array::from(v))),
            }
        }
        Kind::Text => {
            let long = rng.random_bool(0.2);
            let words: Vec<Option<String>> = (0..n)
                .map(|i| {
                    pick(i).then(|| match long && rng.random_bool(0.3) {
                        true => long_word(rng.random_range(0..4)),
                        false => WORDS[rng.random_range(0..WORDS.len())].to_string(),
                    })
                })
                .collect();
            let words: Vec<Option<&str>> = words.iter().map(|w| w.as_deref()).collect();
            match rng.random_range(0..5) {
                0 => (DataType::Utf8View, Arc::new(StringViewArray::from(words))),
                1 => {
                    let dt = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
                    (dt, Arc::new(words.into_iter().collect::<DictionaryArray<Int32Type>>()))
                }
                2 => {
                    let dt = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
                    (dt, Arc::new(words.into_iter().collect::<DictionaryArray<Int8Type>>()))
                }
                3 => (DataType::LargeUtf8, Arc::new(LargeStringArray::from(words))),
                _ => (DataType::Utf8, Arc::new(StringArray::from(words))),
            }
        }
        Kind::Binary => {
            let values: Vec<Option<Vec<u8>>> = (0..n)
                .map(|i| {
                    pick(i).then(|| {
                        let len = [0usize, 1, 3, 8, 20, 300][rng.random_range(0..6)];
                        (0..len).map(|_| rng.random_range(0..4u8) * 60).collect()
                    })
                })
                .collect();
            let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
            match rng.random_range(0..3) {
                0 => (DataType::Binary, Arc::new(BinaryArray::from(values))),
                1 => (DataType::LargeBinary, Arc::new(LargeBinaryArray::from(values))),
                _ => (DataType::BinaryView, Arc::new(BinaryViewArray::from(values))),
            }
        }
        Kind::Date => match rng.random_bool(0.7) {
            true => {
                let v: Date32Array = (0..n).map(|i| pick(i).then(|| rng.random_range(-800..20_000))).collect();
                (DataType::Date32, Arc::new(v))
            }
            false => {
                const DAY_MS: i64 = 86_400_000;
                let v: Date64Array =
                    (0..n).map(|i| pick(i).then(|| rng.random_range(-800..20_000i64) * DAY_MS)).collect();
                (DataType::Date64, Arc::new(v))
            }
        },
        Kind::Timestamp => {
            let micros: Vec<Option<i64>> = (0..n)
                .map(|i| pick(i).then(|| rng.random_range(-1_000_000_000_000i64..2_000_000_000_000_000)))
                .collect();
            match rng.random_range(0..4) {
                0 => (
                    DataType::Timestamp(TimeUnit::Microsecond, None),
                    Arc::new(TimestampMicrosecondArray::from(micros)),
                ),
                1 => {
                    let v =
                        TimestampMillisecondArray::from(micros.iter().map(|x| x.map(|x| x / 1000)).collect::<Vec<_>>())
                            .with_timezone("UTC");
                    (v.data_type().clone(), Arc::new(v))
                }
                2 => {
                    let v =
                        TimestampSecondArray::from(micros.iter().map(|x| x.map(|x| x / 1_000_000)).collect::<Vec<_>>())
                            .with_timezone("+05:30");
                    (v.data_type().clone(), Arc::new(v))
                }
                _ => {
                    let v =
                        TimestampNanosecondArray::from(micros.iter().map(|x| x.map(|x| x * 1000)).collect::<Vec<_>>());
                    (DataType::Timestamp(TimeUnit::Nanosecond, None), Arc::new(v))
                }
            }
        }
        Kind::Time => match rng.random_bool(0.5) {
            true => {
                let v: Time32MillisecondArray =
                    (0..n).map(|i| pick(i).then(|| rng.random_range(0..86_400_000))).collect();
                (DataType::Time32(TimeUnit::Millisecond), Arc::new(v))
            }
            false => {
                let v: Time64MicrosecondArray =
                    (0..n).map(|i| pick(i).then(|| rng.random_range(0..86_400_000_000i64))).collect();
                (DataType::Time64(TimeUnit::Microsecond), Arc::new(v))
            }
        },
        Kind::Duration => match rng.random_bool(0.5) {
            true => {
                let v: DurationMillisecondArray =
                    (0..n).map(|i| pick(i).then(|| rng.random_range(-1_000_000..1_000_000_000i64))).collect();
                (DataType::Duration(TimeUnit::Millisecond), Arc::new(v))
            }
            false => {
                let v: DurationMicrosecondArray =
                    (0..n).map(|i| pick(i).then(|| rng.random_range(-1_000_000..1_000_000_000_000i64))).collect();
                (DataType::Duration(TimeUnit::Microsecond), Arc::new(v))
            }
        },
        Kind::Bool => {
            let v: BooleanArray = (0..n).map(|i| pick(i).then(|| rng.random_bool(0.5))).collect();
            (DataType::Boolean, Arc::new(v))
        }
    }
}

const KINDS: [Kind; 10] = [
    Kind::Int,
    Kind::Decimal,
    Kind::Float,
    Kind::Text,
    Kind::Date,
    Kind::Timestamp,
    Kind::Bool,
    Kind::Binary,
    Kind::Time,
    Kind::Duration,
];

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
    table_of_rows(rng, name, n, key_domain, batch_rows)
}

/// A random table named `name` of exactly `n` rows whose keys come from `0..key_domain`, in
/// batches of at most `batch_rows` rows.
pub fn table_of_rows(rng: &mut StdRng, name: &str, n: usize, key_domain: i64, batch_rows: usize) -> Result<Table> {
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
