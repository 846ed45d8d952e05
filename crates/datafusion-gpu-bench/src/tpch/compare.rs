//! Compares two query results as the benchmark runner and the tests require: the same schema
//! types and the same rows in any order ([`compare`]) or in the same order ([`compare_in_order`],
//! for a query whose ORDER BY fixes it), exactly for integers, decimals, strings and dates, and
//! within 1e-9 relative for floating-point columns (whose sums depend on the order of addition).
//! [`check_sorted`] checks that rows come in the order a query's ORDER BY fixes, rows whose sort
//! keys tie in any order.

use std::cmp::Ordering;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::{LexicographicalComparator, SortColumn, concat_batches};
use datafusion::arrow::datatypes::{DataType, Float16Type, Float32Type, Float64Type};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::physical_expr::LexOrdering;

/// Relative tolerance for floating-point values.
pub const FLOAT_TOLERANCE: f64 = 1e-9;

#[derive(Debug, Clone)]
enum Cell {
    Null,
    Float(f64),
    Exact(String),
}

/// A row split for sorting: exact cells first (in column order), floats after, so rows whose
/// floats differ in the last bits still sort to the same place on both sides.
#[derive(Debug, Clone)]
struct Row {
    exact: Vec<Option<String>>,
    floats: Vec<Option<f64>>,
    cells: Vec<Cell>,
}

fn row_cmp(a: &Row, b: &Row) -> Ordering {
    a.exact.cmp(&b.exact).then_with(|| {
        for (x, y) in a.floats.iter().zip(&b.floats) {
            let o = match (x, y) {
                (Some(x), Some(y)) => x.total_cmp(y),
                _ => x.is_some().cmp(&y.is_some()),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    })
}

fn is_float(dt: &DataType) -> bool {
    matches!(dt, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

fn rows(batches: &[RecordBatch]) -> Result<Vec<Row>, String> {
    let mut out = rows_in_order(batches)?;
    out.sort_by(row_cmp);
    Ok(out)
}

fn rows_in_order(batches: &[RecordBatch]) -> Result<Vec<Row>, String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("cannot format a result column: {e}"))?;
        for r in 0..batch.num_rows() {
            let mut row = Row { exact: Vec::new(), floats: Vec::new(), cells: Vec::new() };
            for (c, col) in batch.columns().iter().enumerate() {
                let cell = if col.is_null(r) {
                    Cell::Null
                } else {
                    match col.data_type() {
                        DataType::Float64 => Cell::Float(col.as_primitive::<Float64Type>().value(r)),
                        DataType::Float32 => Cell::Float(col.as_primitive::<Float32Type>().value(r) as f64),
                        DataType::Float16 => Cell::Float(col.as_primitive::<Float16Type>().value(r).to_f64()),
                        _ => Cell::Exact(formatters[c].value(r).to_string()),
                    }
                };
                if is_float(col.data_type()) {
                    row.floats.push(match cell {
                        Cell::Float(v) => Some(v),
                        _ => None,
                    });
                } else {
                    row.exact.push(match &cell {
                        Cell::Exact(s) => Some(s.clone()),
                        _ => None,
                    });
                }
                row.cells.push(cell);
            }
            out.push(row);
        }
    }
    Ok(out)
}

fn floats_equal(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    a == b || (a - b).abs() <= FLOAT_TOLERANCE * a.abs().max(b.abs())
}

fn show(c: &Cell) -> String {
    match c {
        Cell::Null => "NULL".into(),
        Cell::Float(v) => format!("{v:e}"),
        Cell::Exact(s) => s.clone(),
    }
}

/// `Ok` when `actual` holds the same rows as `expected`; otherwise the first difference found.
pub fn compare(expected: &[RecordBatch], actual: &[RecordBatch]) -> Result<(), String> {
    compare_rows(expected, actual, false)
}

/// `Ok` when `actual` holds the same rows as `expected` in the same order; otherwise the first
/// difference found.
pub fn compare_in_order(expected: &[RecordBatch], actual: &[RecordBatch]) -> Result<(), String> {
    compare_rows(expected, actual, true)
}

fn compare_rows(expected: &[RecordBatch], actual: &[RecordBatch], in_order: bool) -> Result<(), String> {
    let types = |b: &[RecordBatch]| {
        b.first().map(|b| b.schema().fields().iter().map(|f| f.data_type().clone()).collect::<Vec<_>>())
    };
    if let (Some(e), Some(a)) = (types(expected), types(actual))
        && e != a
    {
        return Err(format!("column types differ: CPU {e:?}, GPU {a:?}"));
    }
    let names: Vec<String> = expected
        .first()
        .or(actual.first())
        .map(|b| b.schema().fields().iter().map(|f| f.name().clone()).collect())
        .unwrap_or_default();
    let (e, a) = match in_order {
        true => (rows_in_order(expected)?, rows_in_order(actual)?),
        false => (rows(expected)?, rows(actual)?),
    };
    let what = if in_order { "row" } else { "sorted row" };
    if e.len() != a.len() {
        return Err(format!("{} rows on the CPU, {} with the GPU rule", e.len(), a.len()));
    }
    for (i, (re, ra)) in e.iter().zip(&a).enumerate() {
        for (c, (x, y)) in re.cells.iter().zip(&ra.cells).enumerate() {
            let same = match (x, y) {
                (Cell::Null, Cell::Null) => true,
                (Cell::Float(x), Cell::Float(y)) => floats_equal(*x, *y),
                (Cell::Exact(x), Cell::Exact(y)) => x == y,
                _ => false,
            };
            if !same {
                let name = names.get(c).map_or("?", |s| s.as_str());
                return Err(format!("{what} {i}, column '{name}': CPU {}, GPU {}", show(x), show(y)));
            }
        }
    }
    Ok(())
}

/// `Ok` when the rows of `batches` come in the order `ordering` gives (DataFusion's plan's output
/// ordering, over the result's columns); otherwise the first pair of rows out of order.
pub fn check_sorted(batches: &[RecordBatch], ordering: &LexOrdering) -> Result<(), String> {
    let Some(first) = batches.first() else { return Ok(()) };
    let all = concat_batches(&first.schema(), batches).map_err(|e| format!("cannot concatenate the result: {e}"))?;
    let rows = all.num_rows();
    let keys = ordering
        .iter()
        .map(|key| {
            let values = key
                .expr
                .evaluate(&all)
                .and_then(|v| v.into_array(rows))
                .map_err(|e| format!("cannot evaluate the sort key {key}: {e}"))?;
            Ok(SortColumn { values, options: Some(key.options) })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let order = LexicographicalComparator::try_new(&keys).map_err(|e| format!("cannot compare sort keys: {e}"))?;
    match (1..rows).find(|&i| order.compare(i - 1, i) == Ordering::Greater) {
        None => Ok(()),
        Some(i) => Err(format!("rows {} and {i} are out of the order of [{ordering}]", i - 1)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Decimal128Array, Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(keys: &[Option<i64>], names: &[&str], values: &[f64], money: &[i128]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("name", DataType::Utf8, false),
            Field::new("v", DataType::Float64, false),
            Field::new("m", DataType::Decimal128(15, 2), false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
                Arc::new(Float64Array::from(values.to_vec())),
                Arc::new(Decimal128Array::from(money.to_vec()).with_precision_and_scale(15, 2).unwrap()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_in_another_order_differ_in_order() {
        let a = batch(&[Some(1), Some(2)], &["x", "y"], &[1.0, 2.0], &[10, 20]);
        let b = batch(&[Some(2), Some(1)], &["y", "x"], &[2.0, 1.0], &[20, 10]);
        assert!(compare(&[a.clone()], &[b.clone()]).is_ok());
        let e = compare_in_order(&[a.clone()], &[b]).unwrap_err();
        assert!(e.starts_with("row 0"), "{e}");
        assert!(compare_in_order(&[a.clone()], &[a]).is_ok());
    }

    #[test]
    fn sorted_rows_may_tie_in_any_order() {
        use datafusion::arrow::compute::SortOptions;
        use datafusion::physical_expr::PhysicalSortExpr;
        use datafusion::physical_expr::expressions::col;
        let a = batch(&[Some(1), Some(1), Some(2), None], &["b", "a", "c", "d"], &[3.0, 3.0, 1.0, 0.0], &[1, 2, 3, 4]);
        let schema = a.schema();
        let by = |name: &str, descending: bool| PhysicalSortExpr {
            expr: col(name, &schema).unwrap(),
            options: SortOptions { descending, nulls_first: false },
        };
        let k_asc = LexOrdering::new([by("k", false)]).unwrap();
        assert_eq!(check_sorted(std::slice::from_ref(&a), &k_asc), Ok(()));
        let v_desc_name = LexOrdering::new([by("v", true), by("name", false)]).unwrap();
        let err = check_sorted(std::slice::from_ref(&a), &v_desc_name).unwrap_err();
        assert!(err.starts_with("rows 0 and 1"), "{err}");
        let k_desc = LexOrdering::new([by("k", true)]).unwrap();
        assert!(check_sorted(std::slice::from_ref(&a), &k_desc).is_err());
        // Across batches, and an empty result.
        let (x, y) = (a.slice(0, 2), a.slice(2, 2));
        assert_eq!(check_sorted(&[x, y.clone()], &k_asc), Ok(()));
        assert!(check_sorted(&[y, a.slice(0, 1)], &k_asc).is_err());
        assert_eq!(check_sorted(&[], &k_asc), Ok(()));
    }

    #[test]
    fn same_rows_in_another_order_match() {
        let a = batch(&[Some(1), None, Some(3)], &["a", "b", "c"], &[1.0, 2.0, 3.0], &[100, 200, 300]);
        let b = batch(&[Some(3), Some(1), None], &["c", "a", "b"], &[3.0, 1.0, 2.0], &[300, 100, 200]);
        assert_eq!(compare(&[a], &[b]), Ok(()));
    }

    #[test]
    fn floats_match_within_tolerance_only() {
        let a = batch(&[Some(1)], &["a"], &[1.0e6], &[1]);
        let near = batch(&[Some(1)], &["a"], &[1.0e6 * (1.0 + 1e-12)], &[1]);
        let far = batch(&[Some(1)], &["a"], &[1.0e6 * (1.0 + 1e-6)], &[1]);
        assert_eq!(compare(std::slice::from_ref(&a), &[near]), Ok(()));
        let err = compare(&[a], &[far]).unwrap_err();
        assert!(err.contains("column 'v'"), "{err}");
    }

    #[test]
    fn exact_columns_must_be_exact() {
        let a = batch(&[Some(1)], &["a"], &[1.0], &[12345]);
        let b = batch(&[Some(1)], &["a"], &[1.0], &[12346]);
        let err = compare(std::slice::from_ref(&a), &[b]).unwrap_err();
        assert!(err.contains("123.45") && err.contains("123.46"), "{err}");
        let c = batch(&[None], &["a"], &[1.0], &[12345]);
        assert!(compare(std::slice::from_ref(&a), &[c]).is_err());
        let two = batch(&[Some(1), Some(1)], &["a", "a"], &[1.0, 1.0], &[12345, 12345]);
        assert!(compare(&[a], &[two]).unwrap_err().contains("rows"));
    }
}
