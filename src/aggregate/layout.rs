//! How a DataFusion `AggregateExec` runs on the GPU: which input columns are uploaded, the
//! reductions that turn them into DataFusion's intermediate state columns, the reductions that
//! merge state columns, and how final values come from states.
//!
//! Every supported aggregate's state is what DataFusion's own accumulators keep, column for column
//! (checked against `state_fields()`), so a GPU Partial aggregate feeds a CPU Final one and the
//! reverse:
//!
//! | aggregate | state columns | update (raw rows) | merge (states) |
//! |---|---|---|---|
//! | COUNT(x), COUNT(*) | count Int64 | rows with x not NULL | SUM of counts |
//! | SUM(x) | sum T | wrapping SUM | wrapping SUM |
//! | MIN(x), MAX(x) | T | MIN/MAX | MIN/MAX |
//! | AVG(x) | count UInt64, sum Float64 or Decimal128 | COUNT, SUM | SUM, SUM |
//!
//! SUM, MIN and MAX are NULL for a group without non-NULL inputs. AVG's final value is computed
//! from its merged state by DataFusion's own accumulator on the host (one row per group), so its
//! division, rounding and decimal rules are DataFusion's exactly.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode, AggregateOutputMode};
use datafusion::physical_plan::InputOrderMode;

use super::reduce::{AccOp, Reduction};
use crate::columns::is_supported as can_upload;
use crate::join::keys::KeyColumnKind;
use crate::join::materialize::can_gather;

/// Which aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

impl AggKind {
    fn of(name: &str) -> Option<AggKind> {
        Some(match name.to_ascii_lowercase().as_str() {
            "count" => AggKind::Count,
            "sum" => AggKind::Sum,
            "min" => AggKind::Min,
            "max" => AggKind::Max,
            "avg" | "mean" => AggKind::Avg,
            _ => return None,
        })
    }
}

/// How one output aggregate column is made from the state batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalize {
    /// The state column at this position is the value.
    State(usize),
    /// DataFusion's accumulator of aggregate `agg` evaluates the state columns `states`.
    Evaluate { agg: usize, states: std::ops::Range<usize> },
}

/// An `AggregateExec`'s GPU plan.
#[derive(Debug, Clone)]
pub struct AggregateLayout {
    /// Input columns uploaded (group columns first, in group order), and their schema.
    pub upload_cols: Vec<usize>,
    pub upload_schema: SchemaRef,
    /// Group key columns: the first `groups` uploaded columns.
    pub groups: usize,
    /// Reductions over an uploaded input batch, giving the state columns.
    pub first: Vec<Reduction>,
    /// Reductions over a state batch (keys then states), giving state columns.
    pub merge: Vec<Reduction>,
    /// Group fields then every aggregate's state fields.
    pub state_schema: SchemaRef,
    /// Output final values (else the states are the output).
    pub final_output: bool,
    pub finalize: Vec<Finalize>,
}

fn literal_is_non_null(e: &Arc<dyn PhysicalExpr>) -> bool {
    e.downcast_ref::<Literal>().is_some_and(|l| !l.value().is_null())
}

/// A plain column, or a widening cast of one: (column index, column type, value type).
fn column_arg(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<(usize, DataType, DataType), String> {
    if let Some(c) = e.downcast_ref::<Column>() {
        let dt = schema.field(c.index()).data_type().clone();
        return Ok((c.index(), dt.clone(), dt));
    }
    if let Some(cast) = e.downcast_ref::<CastExpr>() {
        if let Some(c) = cast.expr().downcast_ref::<Column>() {
            let from = schema.field(c.index()).data_type().clone();
            let to = cast.cast_type().clone();
            if widens(&from, &to) {
                return Ok((c.index(), from, to));
            }
            return Err(format!("argument `{e}`: the GPU casts only widen integers, floats and decimals ({from} to {to})"));
        }
    }
    Err(format!("argument `{e}` is not a column (expressions are not evaluated on the GPU yet)"))
}

/// Casts whose every value converts exactly as the kernels read them.
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (a, b) if a == b => true,
        (Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32, Int64) => true,
        (UInt8 | UInt16 | UInt32 | UInt64, UInt64) => true,
        (Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float32 | Float64, Float64) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2)) => s1 == s2 && p2 >= p1,
        _ => false,
    }
}

fn sum_op(value: &DataType, from: &DataType) -> Result<AccOp, String> {
    use DataType::*;
    let ok = widens(from, value);
    match value {
        Int64 if ok => Ok(AccOp::SumI64),
        UInt64 if ok => Ok(AccOp::SumU64),
        Float64 if ok => Ok(AccOp::SumF64),
        Decimal128(..) if ok => Ok(AccOp::SumI128),
        other => Err(format!("a GPU SUM of {from} as {other}")),
    }
}

fn min_max_op(kind: AggKind, dt: &DataType) -> Result<AccOp, String> {
    use DataType::*;
    let min = kind == AggKind::Min;
    match dt {
        Int8 | Int16 | Int32 | Int64 | Date32 | Date64 | Time32(_) | Time64(_) | Timestamp(_, _) | Duration(_) => {
            Ok(if min { AccOp::MinI64 } else { AccOp::MaxI64 })
        }
        UInt8 | UInt16 | UInt32 | UInt64 => Ok(if min { AccOp::MinU64 } else { AccOp::MaxU64 }),
        Decimal128(..) => Ok(if min { AccOp::MinI128 } else { AccOp::MaxI128 }),
        other => Err(format!("MIN/MAX of {other} does not run on the GPU yet")),
    }
}

/// The merge reduction of a state column of type `dt` for aggregate `kind` (state `i` of it).
fn merge_reduction(kind: AggKind, i: usize, input: usize, dt: &DataType) -> Result<Reduction, String> {
    let (op, nullable) = match (kind, i) {
        (AggKind::Count, _) => (sum_op(dt, dt)?, false),
        (AggKind::Sum, _) => (sum_op(dt, dt)?, true),
        (AggKind::Min | AggKind::Max, _) => (min_max_op(kind, dt)?, true),
        (AggKind::Avg, 0) => (sum_op(dt, dt)?, true),
        (AggKind::Avg, _) => (sum_op(dt, dt)?, true),
    };
    Ok(Reduction { op, input: Some(input), filter: None, out_type: dt.clone(), nullable })
}

/// The update reductions of aggregate `a` over raw input, whose states have the types `states`.
/// `position` maps an input column to its uploaded position.
fn update_reductions(
    kind: AggKind,
    a: &AggregateFunctionExpr,
    schema: &Schema,
    states: &[FieldRef],
    filter: Option<usize>,
    position: &mut dyn FnMut(usize) -> usize,
) -> Result<Vec<Reduction>, String> {
    let args = a.expressions();
    let [arg] = args.as_slice() else {
        return Err(format!("aggregate `{}` has {} arguments", a.name(), args.len()));
    };
    let state = |i: usize| -> Result<DataType, String> {
        states.get(i).map(|f| f.data_type().clone()).ok_or_else(|| format!("aggregate `{}` lacks state {i}", a.name()))
    };
    let want_states = if kind == AggKind::Avg { 2 } else { 1 };
    if states.len() != want_states {
        return Err(format!("aggregate `{}` keeps {} state columns, not {want_states}", a.name(), states.len()));
    }
    if kind == AggKind::Count && literal_is_non_null(arg) {
        return Ok(vec![Reduction { op: AccOp::Count, input: None, filter, out_type: state(0)?, nullable: false }]);
    }
    let (col, from, value) = column_arg(arg, schema)?;
    let input = Some(position(col));
    Ok(match kind {
        AggKind::Count => {
            if !can_upload(&from) {
                return Err(format!("COUNT of a {from} column"));
            }
            vec![Reduction { op: AccOp::Count, input, filter, out_type: state(0)?, nullable: false }]
        }
        AggKind::Sum => {
            let out = state(0)?;
            let op = sum_op(&out, &from)?;
            vec![Reduction { op, input, filter, out_type: out, nullable: true }]
        }
        AggKind::Min | AggKind::Max => {
            if from != value {
                return Err(format!("MIN/MAX over a cast `{arg}`"));
            }
            let out = state(0)?;
            if out != from {
                return Err(format!("MIN/MAX of {from} keeps a {out} state"));
            }
            vec![Reduction { op: min_max_op(kind, &from)?, input, filter, out_type: out, nullable: true }]
        }
        AggKind::Avg => {
            let (count, sum) = (state(0)?, state(1)?);
            if count != DataType::UInt64 {
                return Err(format!("AVG keeps a {count} count"));
            }
            let op = sum_op(&sum, &value).and_then(|op| sum_op(&value, &from).map(|_| op))?;
            vec![
                // NULL where no row counted, as DataFusion's AVG state: its merge takes a non-NULL
                // count of 0 for a group with values.
                Reduction { op: AccOp::Count, input, filter, out_type: count, nullable: true },
                Reduction { op, input, filter, out_type: sum, nullable: true },
            ]
        }
    })
}

impl AggregateLayout {
    /// The GPU plan of `agg`, or why it has none.
    pub fn new(agg: &AggregateExec) -> Result<AggregateLayout, String> {
        // The schema of the rows this aggregate reads (for Final modes, the partial states; the
        // exec's `input_schema()` is the first stage's raw input).
        let input_schema = agg.input().schema();
        let group_by = agg.group_expr();
        if !group_by.is_single() {
            return Err("grouping sets do not run on the GPU yet".into());
        }
        if agg.limit_options().is_some() {
            return Err("the aggregate has a limit (top-k groups)".into());
        }
        if *agg.input_order_mode() != InputOrderMode::Linear {
            return Err("the aggregate streams over input sorted on its group keys".into());
        }
        let raw = agg.mode().input_mode() == AggregateInputMode::Raw;
        let final_output = agg.mode().output_mode() == AggregateOutputMode::Final;

        let mut group_cols = Vec::new();
        for (expr, _) in group_by.expr() {
            let c = expr
                .downcast_ref::<Column>()
                .ok_or_else(|| format!("group key `{expr}` is not a plain column"))?
                .index();
            let dt = input_schema.field(c).data_type();
            KeyColumnKind::of(dt).map_err(|e| format!("group key `{expr}`: {e}"))?;
            if !can_gather(dt) {
                return Err(format!("group key `{expr}` of type {dt} cannot be gathered on the GPU"));
            }
            group_cols.push(c);
        }
        let k = group_cols.len();
        let out_schema = agg.schema();
        let mut state_fields: Vec<FieldRef> = out_schema.fields().iter().take(k).cloned().collect();
        let mut per_agg = Vec::new();
        for a in agg.aggr_expr() {
            let kind = AggKind::of(a.fun().name())
                .ok_or_else(|| format!("aggregate function `{}` does not run on the GPU yet", a.name()))?;
            if a.is_distinct() {
                return Err(format!("`{}`: DISTINCT aggregates do not run on the GPU yet", a.name()));
            }
            let states = a.state_fields().map_err(|e| e.to_string())?;
            per_agg.push((kind, states.clone()));
            state_fields.extend(states);
        }
        let state_schema = Arc::new(Schema::new(state_fields.clone()));

        // Merge reductions: state columns k.. of a state batch.
        let mut merge = Vec::new();
        let mut pos = k;
        for (kind, states) in &per_agg {
            for (i, f) in states.iter().enumerate() {
                merge.push(merge_reduction(*kind, i, pos, f.data_type())?);
                pos += 1;
            }
        }

        let (upload_cols, first) = if raw {
            let mut upload: Vec<usize> = group_cols.clone();
            let mut position = |c: usize| match upload.iter().position(|&u| u == c) {
                Some(p) => p,
                None => {
                    upload.push(c);
                    upload.len() - 1
                }
            };
            let mut first = Vec::new();
            for ((a, (kind, states)), filter) in agg.aggr_expr().iter().zip(&per_agg).zip(agg.filter_expr()) {
                let filter = match filter {
                    None => None,
                    Some(f) => {
                        let c = f.downcast_ref::<Column>().ok_or_else(|| {
                            format!("FILTER `{f}` of `{}` is not a Boolean column (not evaluated on the GPU yet)", a.name())
                        })?;
                        if input_schema.field(c.index()).data_type() != &DataType::Boolean {
                            return Err(format!("FILTER `{f}` is not Boolean"));
                        }
                        Some(position(c.index()))
                    }
                };
                first.extend(update_reductions(*kind, a, &input_schema, states, filter, &mut position)?);
            }
            (upload, first)
        } else {
            // State input: the group columns then the states, as this aggregate's own state layout.
            let input_types: Vec<&DataType> = input_schema.fields().iter().map(|f| f.data_type()).collect();
            let state_types: Vec<&DataType> = state_schema.fields().iter().map(|f| f.data_type()).collect();
            if group_cols != (0..k).collect::<Vec<_>>() || input_types != state_types {
                return Err("the aggregate's state input is not laid out as its group columns then its states".into());
            }
            ((0..input_types.len()).collect(), merge.clone())
        };
        for c in &upload_cols {
            let dt = input_schema.field(*c).data_type();
            if !can_upload(dt) {
                return Err(format!("input column {} of type {dt} cannot be uploaded", input_schema.field(*c).name()));
            }
        }
        let upload_schema =
            Arc::new(Schema::new(upload_cols.iter().map(|c| input_schema.field(*c).clone()).collect::<Vec<Field>>()));

        // Final values: states, except AVG's, which DataFusion's accumulator evaluates.
        let mut finalize = Vec::new();
        let mut pos = k;
        for (i, (kind, states)) in per_agg.iter().enumerate() {
            finalize.push(if *kind == AggKind::Avg {
                Finalize::Evaluate { agg: i, states: pos..pos + states.len() }
            } else {
                Finalize::State(pos)
            });
            pos += states.len();
        }
        if final_output {
            for (f, a) in finalize.iter().zip(agg.aggr_expr()) {
                if let Finalize::State(p) = f {
                    let (have, want) = (state_schema.field(*p).data_type(), a.field());
                    if have != want.data_type() {
                        return Err(format!("`{}` returns {} but its state is {have}", a.name(), want.data_type()));
                    }
                }
            }
        } else if state_schema.fields().len() != out_schema.fields().len() {
            return Err("the partial aggregate's output is not its group columns then its states".into());
        }
        Ok(AggregateLayout { upload_cols, upload_schema, groups: k, first, merge, state_schema, final_output, finalize })
    }
}
