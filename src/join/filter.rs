//! Join filters (residual predicates such as TPC-H q21's `l_suppkey <> l_suppkey`) on the GPU.
//!
//! A filter's physical expression is translated into one CUDA kernel (`join_filter`) by the
//! shared expression generator ([`crate::expr::codegen`], which lists what it handles),
//! compiled by NVRTC once per distinct expression and cached like the built-in kernels. The
//! kernel reads the columns it needs at each candidate pair's build and probe rows and keeps the
//! pair when the predicate is TRUE, with SQL's three-valued logic. Anything the generator refuses
//! keeps the join on the CPU, with the reason.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::JoinSide;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::joins::utils::ColumnIndex;

use crate::expr::codegen::{ColumnRead, Gen, HELPERS, R, Ty};

/// A column a filter reads: which side, and its index in that side's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterColumn {
    pub build: bool,
    pub index: usize,
    pub data_type: DataType,
}

/// A filter as CUDA source, and the columns its kernel reads (in the order of its `cols`
/// argument: three addresses each, see [`FilterCode::source`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterCode {
    /// `join_filter(const u32* rb, const u32* rp, u64 n, const u64* cols, u8* keep, u32* err)`:
    /// `cols` holds, per column, its values (or string offsets), its string bytes (or 0) and its
    /// validity (or 0); `err` is set where arrow would fail (decimal overflow).
    pub source: String,
    pub columns: Vec<FilterColumn>,
    /// Whether the kernel can raise its error flag (only then is the flag read back).
    pub may_fail: bool,
}

/// The kernel of a join filter `expr` over its intermediate `schema`, whose columns come from the
/// join's inputs as `indices` say; or why it cannot run on the GPU.
pub fn generate(expr: &Arc<dyn PhysicalExpr>, schema: &Schema, indices: &[ColumnIndex]) -> R<FilterCode> {
    let mut columns: Vec<FilterColumn> = Vec::new();
    let mut read = |c: &Column| -> R<ColumnRead> {
        let ci = indices.get(c.index()).ok_or_else(|| format!("filter column {c} is out of range"))?;
        let build = match ci.side {
            JoinSide::Left => true,
            JoinSide::Right => false,
            JoinSide::None => return Err(format!("filter column {c} belongs to neither side")),
        };
        let data_type = schema.field(c.index()).data_type().clone();
        columns.push(FilterColumn { build, index: ci.index, data_type });
        Ok(ColumnRead { slot: columns.len() - 1, row: if build { "rb[k]".into() } else { "rp[k]".into() } })
    };
    let mut g = Gen::new(schema, &mut read);
    let top = g.expr(expr)?;
    if top.ty != Ty::Bool {
        return Err(format!("the filter has type {}", top.dt));
    }
    let may_fail = top.err != "false";
    let (globals, body) = (std::mem::take(&mut g.globals), std::mem::take(&mut g.body));
    drop(g);
    let source = format!(
        r#"// A join filter, generated from `{expr}` (src/join/filter.rs).
#include "common.cuh"
{HELPERS}
{globals}
extern "C" __global__ void join_filter(const u32* __restrict__ rb, const u32* __restrict__ rp, u64 n, const u64* __restrict__ cols,
                                       u8* __restrict__ keep, u32* __restrict__ err) {{
    bool failed = false;
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {{
{body}        keep[k] = {ok} && {v};
        failed |= {e};
    }}
    if (failed) *err = 1;
}}
"#,
        expr = expr.to_string().replace('\n', " ").replace("*/", "* /"),
        ok = top.ok,
        v = top.v,
        e = top.err,
    );
    Ok(FilterCode { source, columns, may_fail })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{binary, col, is_null, lit, not};

    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::BinaryExpr;

    use super::*;

    fn schema() -> (Schema, Vec<ColumnIndex>) {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Float64, true),
            Field::new("d", DataType::Decimal128(12, 2), true),
        ]);
        let idx = vec![
            ColumnIndex { index: 3, side: JoinSide::Left },
            ColumnIndex { index: 1, side: JoinSide::Right },
            ColumnIndex { index: 0, side: JoinSide::Left },
            ColumnIndex { index: 2, side: JoinSide::Right },
            ColumnIndex { index: 5, side: JoinSide::Right },
        ];
        (schema, idx)
    }

    #[test]
    fn supported_filters_generate_a_kernel_reading_their_columns() {
        let (s, idx) = schema();
        let e = binary(
            binary(col("a", &s).unwrap(), Operator::NotEq, col("b", &s).unwrap(), &s).unwrap(),
            Operator::And,
            not(is_null(col("s", &s).unwrap()).unwrap()).unwrap(),
            &s,
        )
        .unwrap();
        let code = generate(&e, &s, &idx).unwrap();
        assert!(code.source.contains("extern \"C\" __global__ void join_filter"), "{}", code.source);
        assert_eq!(
            code.columns,
            vec![
                FilterColumn { build: true, index: 3, data_type: DataType::Int32 },
                FilterColumn { build: false, index: 1, data_type: DataType::Int32 },
                FilterColumn { build: true, index: 0, data_type: DataType::Utf8 },
            ]
        );
        // A decimal comparison with a literal and a string literal compile to constants.
        let e =
            binary(col("d", &s).unwrap(), Operator::Gt, lit(ScalarValue::Decimal128(Some(-12345), 12, 2)), &s).unwrap();
        assert!(generate(&e, &s, &idx).unwrap().source.contains("__int128"));
        let e = binary(col("s", &s).unwrap(), Operator::Lt, lit("é"), &s).unwrap();
        assert!(generate(&e, &s, &idx).unwrap().source.contains("lit"));
    }

    #[test]
    fn unsupported_filters_say_why() {
        let (s, idx) = schema();
        let float = binary(col("f", &s).unwrap(), Operator::Gt, lit(1.5f64), &s).unwrap();
        // Floats compare in arrow's total order.
        assert!(generate(&float, &s, &idx).unwrap().source.contains("f64_key"));
        let mixed = binary(col("f", &s).unwrap(), Operator::Gt, col("d", &s).unwrap(), &s).unwrap();
        assert!(generate(&mixed, &s, &idx).is_err());
        let div = binary(
            binary(col("a", &s).unwrap(), Operator::Divide, col("b", &s).unwrap(), &s).unwrap(),
            Operator::Gt,
            lit(1i32),
            &s,
        )
        .unwrap();
        assert!(generate(&div, &s, &idx).unwrap_err().contains("operator /"));
        let checked = Arc::new(
            BinaryExpr::new(col("a", &s).unwrap(), Operator::Plus, col("b", &s).unwrap()).with_fail_on_overflow(true),
        ) as Arc<dyn PhysicalExpr>;
        let e = binary(checked, Operator::Gt, lit(1i32), &s).unwrap();
        assert!(generate(&e, &s, &idx).unwrap_err().contains("fails on overflow"));
    }
}
