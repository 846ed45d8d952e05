//! Another engine beside the runner, in the same process (`bench tpch|ssb --peer duckdb`): DuckDB
//! loads the run's Parquet into its own in-memory tables, runs the same query texts with as many
//! threads as DataFusion has partitions (one untimed run, then the runner's count of timed runs),
//! and its rows are checked against DataFusion's.
//!
//! DuckDB comes from the `duckdb` feature, built from its bundled sources (many minutes on two
//! cores; CI does not build it). Its crate brings its own arrow, so no arrow type crosses between
//! the two: its rows are read as values and compared with DataFusion's cell by cell, numbers
//! within [`PEER_TOLERANCE`] (the engines type averages and some products differently: decimals
//! on one side, doubles on the other), text and dates exactly.

use std::cmp::Ordering;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::{DataFusionError, Result};

/// The engines `--peer` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    /// DuckDB (the `duckdb` feature).
    Duckdb,
}

/// Whether this binary can run `peer`: an error that says how to build one that can, before the
/// run loads any data.
pub fn available(peer: Option<Peer>) -> Result<()> {
    match (peer, cfg!(feature = "duckdb")) {
        (Some(Peer::Duckdb), false) => Err(DataFusionError::Configuration(
            "--peer duckdb needs a binary built with the `duckdb` feature: cargo build --release -p \
             datafusion-gpu-cli --features duckdb (it compiles DuckDB from source)"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// Relative tolerance for numbers compared across engines.
pub const PEER_TOLERANCE: f64 = 1e-6;

/// One result cell as both engines can give it. DataFusion's decimals carry their scale: a
/// value computed past it (an average) may differ from the other engine's double by one unit
/// of its last digit.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Number(f64),
    Decimal(f64, i8),
    Text(String),
}

/// One query on the peer: the median and every timed run, and whether its rows matched
/// DataFusion's (`check` says what differed, or the error).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerQuery {
    pub ms: Option<f64>,
    pub runs_ms: Vec<f64>,
    pub ok: bool,
    pub check: String,
}

/// DataFusion's result as cells: numbers (integers, floats, decimals) as `Number`, everything
/// else as its text (dates as `yyyy-mm-dd`).
pub fn cells_of(batches: &[RecordBatch]) -> Result<Vec<Vec<Cell>>> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for r in 0..batch.num_rows() {
            let mut row = Vec::with_capacity(batch.num_columns());
            for (c, column) in batch.columns().iter().enumerate() {
                if column.is_null(r) {
                    row.push(Cell::Null);
                    continue;
                }
                let text = formatters[c].value(r).to_string();
                let number = || {
                    text.parse::<f64>()
                        .map_err(|e| DataFusionError::Execution(format!("the number '{text}' does not parse: {e}")))
                };
                row.push(match column.data_type() {
                    DataType::Decimal32(_, s)
                    | DataType::Decimal64(_, s)
                    | DataType::Decimal128(_, s)
                    | DataType::Decimal256(_, s) => Cell::Decimal(number()?, *s),
                    dt if dt.is_numeric() => Cell::Number(number()?),
                    _ => Cell::Text(text.clone()),
                });
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

fn number(c: &Cell) -> Option<f64> {
    match c {
        Cell::Number(n) | Cell::Decimal(n, _) => Some(*n),
        _ => None,
    }
}

/// The order rows are compared in: text cells first (in column order), then numbers to three
/// digits, so that rows whose numbers differ within the tolerance sort alike on both sides.
fn sort_key(row: &[Cell]) -> (Vec<Option<&str>>, Vec<Option<String>>) {
    let text = row
        .iter()
        .filter(|c| number(c).is_none())
        .map(|c| match c {
            Cell::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let numbers =
        row.iter().filter(|c| !matches!(c, Cell::Text(_))).map(|c| number(c).map(|n| format!("{n:.2e}"))).collect();
    (text, numbers)
}

/// Whether DataFusion's `want` and the peer's `got` are the same value: numbers within the
/// relative tolerance, or within one unit of the last digit of DataFusion's decimal.
fn close(want: &Cell, got: &Cell) -> bool {
    let (Some(a), Some(b)) = (number(want), number(got)) else { return want == got };
    let unit = match want {
        Cell::Decimal(_, scale) => 10f64.powi(-(*scale as i32)),
        _ => 0.0,
    };
    a == b || (a - b).abs() <= (PEER_TOLERANCE * a.abs().max(b.abs()).max(1e-3)).max(unit)
}

/// Whether the peer's `actual` rows are DataFusion's `expected` ones, in any order: `Err` says
/// the first difference.
pub fn compare_cells(expected: &[Vec<Cell>], actual: &[Vec<Cell>]) -> std::result::Result<(), String> {
    if expected.len() != actual.len() {
        return Err(format!("{} rows, DataFusion {}", actual.len(), expected.len()));
    }
    let (mut e, mut a): (Vec<&Vec<Cell>>, Vec<&Vec<Cell>>) = (expected.iter().collect(), actual.iter().collect());
    let order = |x: &&Vec<Cell>, y: &&Vec<Cell>| -> Ordering { sort_key(x).cmp(&sort_key(y)) };
    e.sort_by(order);
    a.sort_by(order);
    for (i, (x, y)) in e.iter().zip(&a).enumerate() {
        let same = x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| close(p, q));
        if !same {
            return Err(format!("row {i} (sorted): {y:?}, DataFusion {x:?}"));
        }
    }
    Ok(())
}

#[cfg(feature = "duckdb")]
mod engine {
    use std::path::Path;

    use datafusion::error::{DataFusionError, Result};
    use duckdb::types::ValueRef;

    use super::Cell;

    fn failed(what: &str, e: duckdb::Error) -> DataFusionError {
        DataFusionError::Execution(format!("DuckDB {what}: {e}"))
    }

    /// A DuckDB database in this process, its tables loaded.
    pub struct DuckDb {
        conn: duckdb::Connection,
        pub version: String,
    }

    impl DuckDb {
        /// An in-memory database with `threads` threads and each of `tables` loaded from
        /// `dir/<table>.parquet`.
        pub fn open(dir: &Path, tables: &[&str], threads: usize) -> Result<DuckDb> {
            let conn = duckdb::Connection::open_in_memory().map_err(|e| failed("could not open", e))?;
            conn.execute_batch(&format!("SET threads = {threads};")).map_err(|e| failed("SET threads", e))?;
            for t in tables {
                let file = dir.join(format!("{t}.parquet"));
                let path = file.display().to_string().replace('\'', "''");
                conn.execute_batch(&format!("CREATE TABLE \"{t}\" AS SELECT * FROM read_parquet('{path}');"))
                    .map_err(|e| failed(&format!("could not load {}", file.display()), e))?;
            }
            let version = conn
                .query_row("SELECT version()", [], |r| r.get::<_, String>(0))
                .map_err(|e| failed("version()", e))?;
            Ok(DuckDb { conn, version })
        }

        /// The rows of `sql`, one statement (as the runner gives DataFusion).
        pub fn rows(&self, sql: &str) -> Result<Vec<Vec<Cell>>> {
            let mut stmt = self.conn.prepare(sql).map_err(|e| failed("could not prepare the query", e))?;
            let mut rows = stmt.query([]).map_err(|e| failed("failed", e))?;
            let n = rows.as_ref().map_or(0, |s| s.column_count());
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(|e| failed("failed", e))? {
                let mut cells = Vec::with_capacity(n);
                for i in 0..n {
                    cells.push(cell(row.get_ref(i).map_err(|e| failed("gave a value it cannot read", e))?)?);
                }
                out.push(cells);
            }
            Ok(out)
        }
    }

    fn cell(v: ValueRef<'_>) -> Result<Cell> {
        Ok(match v {
            ValueRef::Null => Cell::Null,
            ValueRef::Boolean(b) => Cell::Text(b.to_string()),
            ValueRef::TinyInt(x) => Cell::Number(x as f64),
            ValueRef::SmallInt(x) => Cell::Number(x as f64),
            ValueRef::Int(x) => Cell::Number(x as f64),
            ValueRef::BigInt(x) => Cell::Number(x as f64),
            ValueRef::HugeInt(x) => Cell::Number(x as f64),
            ValueRef::UHugeInt(x) => Cell::Number(x as f64),
            ValueRef::UTinyInt(x) => Cell::Number(x as f64),
            ValueRef::USmallInt(x) => Cell::Number(x as f64),
            ValueRef::UInt(x) => Cell::Number(x as f64),
            ValueRef::UBigInt(x) => Cell::Number(x as f64),
            ValueRef::Float(x) => Cell::Number(x as f64),
            ValueRef::Double(x) => Cell::Number(x),
            ValueRef::Decimal(d) => Cell::Number(
                d.to_string()
                    .parse::<f64>()
                    .map_err(|e| DataFusionError::Execution(format!("DuckDB's decimal {d} does not parse: {e}")))?,
            ),
            ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Date32(days) => Cell::Text(
                datafusion::arrow::temporal_conversions::date32_to_datetime(days)
                    .map(|d| d.date().to_string())
                    .ok_or_else(|| DataFusionError::Execution(format!("DuckDB's date {days} is out of range")))?,
            ),
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "a DuckDB result value of type {:?}",
                    other.data_type()
                )));
            }
        })
    }
}

#[cfg(feature = "duckdb")]
pub use engine::DuckDb;

/// Without the `duckdb` feature there is no peer to open.
#[cfg(not(feature = "duckdb"))]
pub struct DuckDb {
    pub version: String,
}

#[cfg(not(feature = "duckdb"))]
impl DuckDb {
    pub fn open(_dir: &std::path::Path, _tables: &[&str], _threads: usize) -> Result<DuckDb> {
        available(Some(Peer::Duckdb))?;
        Err(DataFusionError::Configuration("no DuckDB in this binary".into()))
    }

    pub fn rows(&self, _sql: &str) -> Result<Vec<Vec<Cell>>> {
        Err(DataFusionError::Configuration("no DuckDB in this binary".into()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    /// DataFusion's cells: numbers of every kind as numbers, dates and text as text, NULLs.
    #[test]
    fn datafusion_results_become_cells() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("d", DataType::Decimal128(15, 2), false),
            Field::new("f", DataType::Float64, false),
            Field::new("s", DataType::Utf8, false),
            Field::new("t", DataType::Date32, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(7), None])),
                Arc::new(Decimal128Array::from(vec![12345, -5]).with_precision_and_scale(15, 2).unwrap()),
                Arc::new(Float64Array::from(vec![0.5, 2.0])),
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(Date32Array::from(vec![9204, 0])),
            ],
        )
        .unwrap();
        let cells = cells_of(&[batch]).unwrap();
        assert_eq!(
            cells[0],
            vec![
                Cell::Number(7.0),
                Cell::Decimal(123.45, 2),
                Cell::Number(0.5),
                Cell::Text("a".into()),
                Cell::Text("1995-03-15".into())
            ]
        );
        assert_eq!(cells[1][0], Cell::Null);
        assert_eq!(cells[1][1], Cell::Decimal(-0.05, 2));
        assert_eq!(cells[1][4], Cell::Text("1970-01-01".into()));
    }

    /// Rows match in any order, numbers within the tolerance; a different count, text or number
    /// outside it does not.
    #[test]
    fn rows_compare_in_any_order_within_the_tolerance() {
        let row = |s: &str, n: f64| vec![Cell::Text(s.into()), Cell::Number(n), Cell::Null];
        let expected = vec![row("a", 1.0), row("b", 2.5e9)];
        assert!(compare_cells(&expected, &[row("b", 2.5e9 * (1.0 + 1e-9)), row("a", 1.0)]).is_ok());
        assert!(compare_cells(&expected, &[row("a", 1.0)]).is_err());
        assert!(compare_cells(&expected, &[row("a", 1.0), row("c", 2.5e9)]).is_err());
        assert!(compare_cells(&expected, &[row("a", 1.0), row("b", 2.5e9 * 1.001)]).is_err());
        // A decimal of scale 6 (an average) against the peer's double: one unit of its last digit.
        let avg = vec![vec![Cell::Decimal(0.050081, 6)]];
        assert!(compare_cells(&avg, &[vec![Cell::Number(0.05008133906964238)]]).is_ok());
        assert!(compare_cells(&avg, &[vec![Cell::Number(0.050083)]]).is_err());
        let nulls = vec![vec![Cell::Null, Cell::Number(1.0)]];
        assert!(compare_cells(&nulls, &[vec![Cell::Number(0.0), Cell::Number(1.0)]]).is_err());
    }
}
