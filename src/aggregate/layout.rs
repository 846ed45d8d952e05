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
//! | COUNT(DISTINCT x) | List of x's distinct values | distinct lists ([`super::distinct`]) | distinct lists of the merged lists |
//!
//! COUNT(DISTINCT x)'s final value is its list's length.
//! SUM, MIN and MAX are NULL for a group without non-NULL inputs. AVG's final value is computed
//! from its merged state by DataFusion's own accumulator on the host (one row per group), so its
//! division, rounding and decimal rules are DataFusion's exactly.

use datafusion::common::{not_impl_datafusion_err, not_impl_err};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal};
use datafusion::physical_plan::InputOrderMode;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode, AggregateOutputMode};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, PhysicalExpr};

use super::distinct::DistinctSpec;
use super::reduce::{AccOp, Reduction};
use crate::columns::is_supported as can_upload;
use crate::columns::is_supported_list;
use crate::primitives::keys::KeyColumnKind;
use crate::primitives::materialize::can_gather;

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
    /// COUNT(DISTINCT): the length of the List state at this position.
    ListLength(usize),
}

/// An `AggregateExec`'s GPU plan.
#[derive(Debug, Clone)]
pub struct AggregateLayout {
    /// What is uploaded of each input batch (group keys first, in group order), and its schema:
    /// input columns, or expressions DataFusion evaluates on the host batch first (arguments
    /// such as `price * (1 - discount)`, computed group keys, FILTER predicates).
    pub upload: Vec<Arc<dyn PhysicalExpr>>,
    pub upload_schema: SchemaRef,
    /// The uploaded expressions that are not plain columns, as EXPLAIN shows them.
    pub host_evaluated: Vec<String>,
    /// Group key columns: the first `groups` uploaded columns.
    pub groups: usize,
    /// Reductions over an uploaded input batch, giving the state columns.
    pub first: Vec<Reduction>,
    /// Reductions over a state batch (keys then states), giving state columns.
    pub merge: Vec<Reduction>,
    /// COUNT(DISTINCT) states over an uploaded input batch, and over a state batch, in the
    /// order of `distinct_states`.
    pub first_distinct: Vec<DistinctSpec>,
    pub merge_distinct: Vec<DistinctSpec>,
    /// Positions of the COUNT(DISTINCT) states in the state schema (the reductions give the
    /// other state columns, in order).
    pub distinct_states: Vec<usize>,
    /// Group fields then every aggregate's state fields.
    pub state_schema: SchemaRef,
    /// Output final values (else the states are the output).
    pub final_output: bool,
    pub finalize: Vec<Finalize>,
}

fn literal_is_non_null(e: &Arc<dyn PhysicalExpr>) -> bool {
    e.downcast_ref::<Literal>().is_some_and(|l| !l.value().is_null())
}

/// What an argument uploads, with the uploaded type and the value type the reduction reads it
/// as: a plain column; a column under a widening cast (the kernels widen as they read); or any
/// other expression, evaluated by DataFusion on the host batch before the upload.
fn column_arg(
    e: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> crate::error::Result<(Arc<dyn PhysicalExpr>, DataType, DataType)> {
    if let Some(c) = e.downcast_ref::<Column>() {
        let dt = schema.field(c.index()).data_type().clone();
        return Ok((Arc::clone(e), dt.clone(), dt));
    }
    if let Some(cast) = e.downcast_ref::<CastExpr>()
        && let Some(c) = cast.expr().downcast_ref::<Column>()
    {
        let from = schema.field(c.index()).data_type().clone();
        let to = cast.cast_type().clone();
        if widens(&from, &to) {
            return Ok((Arc::clone(cast.expr()), from, to));
        }
    }
    let dt = e.data_type(schema).map_err(|err| not_impl_datafusion_err!("argument `{e}`: {err}"))?;
    Ok((Arc::clone(e), dt.clone(), dt))
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

fn sum_op(value: &DataType, from: &DataType) -> crate::error::Result<AccOp> {
    use DataType::*;
    let ok = widens(from, value);
    match value {
        Int64 if ok => Ok(AccOp::SumI64),
        UInt64 if ok => Ok(AccOp::SumU64),
        Float64 if ok => Ok(AccOp::SumF64),
        Decimal128(..) if ok => Ok(AccOp::SumI128),
        other => not_impl_err!("a GPU SUM of {from} as {other}"),
    }
}

fn min_max_op(kind: AggKind, dt: &DataType) -> crate::error::Result<AccOp> {
    use DataType::*;
    let min = kind == AggKind::Min;
    match dt {
        Int8 | Int16 | Int32 | Int64 | Date32 | Date64 | Time32(_) | Time64(_) | Timestamp(_, _) | Duration(_) => {
            Ok(if min { AccOp::MinI64 } else { AccOp::MaxI64 })
        }
        UInt8 | UInt16 | UInt32 | UInt64 => Ok(if min { AccOp::MinU64 } else { AccOp::MaxU64 }),
        Decimal128(..) => Ok(if min { AccOp::MinI128 } else { AccOp::MaxI128 }),
        // DataFusion's float MIN/MAX keeps whichever of two values compares as unordered or equal
        // came last (NaN, -0.0 against 0.0), so its answer depends on the row order: there is
        // no one answer for the GPU to match.
        Float16 | Float32 | Float64 => not_impl_err!(
            "MIN/MAX of {dt} stays on the CPU: DataFusion's result with NaN or signed zeros depends on the row order"
        ),
        other => not_impl_err!("MIN/MAX of {other} does not run on the GPU yet"),
    }
}

/// The merge reduction of a state column of type `dt` for aggregate `kind` (state `i` of it).
fn merge_reduction(kind: AggKind, i: usize, input: usize, dt: &DataType) -> crate::error::Result<Reduction> {
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
    position: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> usize,
) -> crate::error::Result<Vec<Reduction>> {
    let args = a.expressions();
    let [arg] = args.as_slice() else {
        return not_impl_err!("aggregate `{}` has {} arguments", a.name(), args.len());
    };
    let state = |i: usize| -> crate::error::Result<DataType> {
        states
            .get(i)
            .map(|f| f.data_type().clone())
            .ok_or_else(|| not_impl_datafusion_err!("aggregate `{}` lacks state {i}", a.name()))
    };
    let want_states = if kind == AggKind::Avg { 2 } else { 1 };
    if states.len() != want_states {
        return not_impl_err!("aggregate `{}` keeps {} state columns, not {want_states}", a.name(), states.len());
    }
    if kind == AggKind::Count && literal_is_non_null(arg) {
        return Ok(vec![Reduction { op: AccOp::Count, input: None, filter, out_type: state(0)?, nullable: false }]);
    }
    let (expr, from, value) = column_arg(arg, schema)?;
    if !can_upload(&from) {
        return not_impl_err!("argument `{arg}` of type {from} cannot be uploaded");
    }
    let input = Some(position(&expr));
    Ok(match kind {
        AggKind::Count => {
            if !can_upload(&from) {
                return not_impl_err!("COUNT of a {from} column");
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
                return not_impl_err!("MIN/MAX over a cast `{arg}`");
            }
            let out = state(0)?;
            if out != from {
                return not_impl_err!("MIN/MAX of {from} keeps a {out} state");
            }
            vec![Reduction { op: min_max_op(kind, &from)?, input, filter, out_type: out, nullable: true }]
        }
        AggKind::Avg => {
            let (count, sum) = (state(0)?, state(1)?);
            if count != DataType::UInt64 {
                return not_impl_err!("AVG keeps a {count} count");
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

/// The COUNT(DISTINCT) of aggregate `a` over raw rows, whose state is `state` (a List).
/// `position` maps an input column to its uploaded position.
fn distinct_spec(
    a: &AggregateFunctionExpr,
    schema: &Schema,
    state: &FieldRef,
    filter: Option<usize>,
    position: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> usize,
) -> crate::error::Result<DistinctSpec> {
    let args = a.expressions();
    let [arg] = args.as_slice() else {
        return not_impl_err!("aggregate `{}` has {} arguments", a.name(), args.len());
    };
    let DataType::List(item) = state.data_type() else {
        return not_impl_err!("`{}` keeps a {} state", a.name(), state.data_type());
    };
    // A cast is not read through here: the list holds the cast values.
    let (expr, from, value) = column_arg(arg, schema)?;
    let (expr, from) = if from == value { (expr, from) } else { (Arc::clone(arg), value) };
    KeyColumnKind::of(&from).map_err(|e| not_impl_datafusion_err!("COUNT(DISTINCT) of `{arg}`: {e}"))?;
    let listed = match &from {
        DataType::Dictionary(_, v) => v.as_ref(),
        other => other,
    };
    if !can_gather(&from) || !can_upload(&from) || listed != item.data_type() {
        return not_impl_err!("COUNT(DISTINCT) of `{arg}` ({from}) into a list of {}", item.data_type());
    }
    Ok(DistinctSpec { input: position(&expr), filter, list_type: state.data_type().clone() })
}

impl AggregateLayout {
    /// The position in the state of each column of `output` (the aggregate's output schema),
    /// when the output is made of state columns as they are (group keys, partial states, final
    /// values that are their own state: SUM, MIN, MAX, COUNT) of types device batches carry:
    /// then the merged state is the output, and a GPU parent can read it on the device. `None`
    /// when the host must compute some of it (AVG's division, COUNT(DISTINCT)'s list lengths).
    pub fn device_output(&self, output: &Schema) -> Option<Vec<usize>> {
        let columns: Vec<usize> = match self.final_output {
            false => (0..self.state_schema.fields().len()).collect(),
            true => {
                let values = self.finalize.iter().map(|f| match f {
                    Finalize::State(p) => Some(*p),
                    Finalize::Evaluate { .. } | Finalize::ListLength(_) => None,
                });
                (0..self.groups).map(Some).chain(values).collect::<Option<_>>()?
            }
        };
        let fits = columns.len() == output.fields().len()
            && columns.iter().zip(output.fields()).all(|(&p, f)| {
                self.state_schema.fields().get(p).is_some_and(|s| s.data_type() == f.data_type())
                    && can_upload(f.data_type())
            });
        fits.then_some(columns)
    }

    /// What this aggregate uploads of an input batch: its columns, and the host-evaluated
    /// expressions computed by DataFusion.
    pub fn project(&self, batch: &RecordBatch) -> datafusion::error::Result<RecordBatch> {
        let rows = batch.num_rows();
        let columns = self
            .upload
            .iter()
            .map(|e| e.evaluate(batch).and_then(|v| v.into_array(rows)))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(Arc::clone(&self.upload_schema), columns, &options)?)
    }

    /// The GPU plan of `agg`, or why it has none.
    pub fn new(agg: &AggregateExec) -> crate::error::Result<AggregateLayout> {
        // The schema of the rows this aggregate reads (for Final modes, the partial states; the
        // exec's `input_schema()` is the first stage's raw input).
        let input_schema = agg.input().schema();
        let group_by = agg.group_expr();
        if !group_by.is_single() {
            return not_impl_err!("grouping sets do not run on the GPU yet");
        }
        if agg.limit_options().is_some() {
            return not_impl_err!("the aggregate has a limit (top-k groups)");
        }
        if !sorted_keys_are_constant(agg) {
            return not_impl_err!("the aggregate streams over input sorted on its group keys");
        }
        let raw = agg.mode().input_mode() == AggregateInputMode::Raw;
        let final_output = agg.mode().output_mode() == AggregateOutputMode::Final;

        let mut group_exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        for (expr, _) in group_by.expr() {
            let dt = expr.data_type(&input_schema).map_err(|e| not_impl_datafusion_err!("group key `{expr}`: {e}"))?;
            KeyColumnKind::of(&dt).map_err(|e| not_impl_datafusion_err!("group key `{expr}`: {e}"))?;
            if !can_gather(&dt) {
                return not_impl_err!("group key `{expr}` of type {dt} cannot be gathered on the GPU");
            }
            group_exprs.push(Arc::clone(expr));
        }
        let k = group_exprs.len();
        let out_schema = agg.schema();
        let mut state_fields: Vec<FieldRef> = out_schema.fields().iter().take(k).cloned().collect();
        let mut per_agg = Vec::new();
        for a in agg.aggr_expr() {
            let kind = AggKind::of(a.fun().name()).ok_or_else(|| {
                not_impl_datafusion_err!("aggregate function `{}` does not run on the GPU yet", a.name())
            })?;
            let states = a.state_fields()?;
            if a.is_distinct() {
                if kind != AggKind::Count {
                    return not_impl_err!(
                        "`{}`: of the DISTINCT aggregates, COUNT(DISTINCT x) runs on the GPU",
                        a.name()
                    );
                }
                match states.as_slice() {
                    [f] if is_supported_list(f.data_type()) => {}
                    _ => return not_impl_err!("`{}` keeps a state that is not one List", a.name()),
                }
            }
            per_agg.push((kind, states.clone()));
            state_fields.extend(states);
        }
        let state_schema = Arc::new(Schema::new(state_fields.clone()));

        // Merge reductions: state columns k.. of a state batch.
        let mut merge = Vec::new();
        let mut merge_distinct = Vec::new();
        let mut distinct_states = Vec::new();
        let mut pos = k;
        for ((kind, states), a) in per_agg.iter().zip(agg.aggr_expr()) {
            for (i, f) in states.iter().enumerate() {
                if a.is_distinct() {
                    merge_distinct.push(DistinctSpec { input: pos, filter: None, list_type: f.data_type().clone() });
                    distinct_states.push(pos);
                } else {
                    merge.push(merge_reduction(*kind, i, pos, f.data_type())?);
                }
                pos += 1;
            }
        }

        let (upload, first, first_distinct) = if raw {
            let mut upload: Vec<Arc<dyn PhysicalExpr>> = group_exprs.clone();
            let mut position = |e: &Arc<dyn PhysicalExpr>| match upload.iter().position(|u| u == e) {
                Some(p) => p,
                None => {
                    upload.push(Arc::clone(e));
                    upload.len() - 1
                }
            };
            let mut first = Vec::new();
            let mut first_distinct = Vec::new();
            for ((a, (kind, states)), filter) in agg.aggr_expr().iter().zip(&per_agg).zip(agg.filter_expr()) {
                let filter = match filter {
                    None => None,
                    Some(f) => {
                        let dt =
                            f.data_type(&input_schema).map_err(|e| not_impl_datafusion_err!("FILTER `{f}`: {e}"))?;
                        if dt != DataType::Boolean {
                            return not_impl_err!("FILTER `{f}` of `{}` is {dt}, not Boolean", a.name());
                        }
                        Some(position(f))
                    }
                };
                if a.is_distinct() {
                    first_distinct.push(distinct_spec(a, &input_schema, &states[0], filter, &mut position)?);
                } else {
                    first.extend(update_reductions(*kind, a, &input_schema, states, filter, &mut position)?);
                }
            }
            (upload, first, first_distinct)
        } else {
            // State input: the group columns then the states, as this aggregate's own state layout.
            let input_types: Vec<&DataType> = input_schema.fields().iter().map(|f| f.data_type()).collect();
            let state_types: Vec<&DataType> = state_schema.fields().iter().map(|f| f.data_type()).collect();
            let plain_groups =
                group_exprs.iter().enumerate().all(|(i, e)| e.downcast_ref::<Column>().is_some_and(|c| c.index() == i));
            if !plain_groups || input_types != state_types {
                return not_impl_err!(
                    "the aggregate's state input is not laid out as its group columns then its states"
                );
            }
            let columns = input_schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>)
                .collect();
            (columns, merge.clone(), merge_distinct.clone())
        };
        let mut upload_fields = Vec::new();
        let mut host_evaluated = Vec::new();
        for e in &upload {
            let field = match e.downcast_ref::<Column>() {
                Some(c) => input_schema.field(c.index()).clone(),
                None => {
                    host_evaluated.push(e.to_string());
                    let dt = e.data_type(&input_schema).map_err(|err| not_impl_datafusion_err!("`{e}`: {err}"))?;
                    let nullable = e.nullable(&input_schema).map_err(|err| not_impl_datafusion_err!("`{e}`: {err}"))?;
                    Field::new(e.to_string(), dt, nullable)
                }
            };
            let state_list = !raw && is_supported_list(field.data_type());
            if !can_upload(field.data_type()) && !state_list {
                return not_impl_err!("input `{e}` of type {} cannot be uploaded", field.data_type());
            }
            upload_fields.push(field);
        }
        let upload_schema = Arc::new(Schema::new(upload_fields));

        // Final values: states, except AVG's, which DataFusion's accumulator evaluates.
        let mut finalize = Vec::new();
        let mut pos = k;
        for (i, ((kind, states), a)) in per_agg.iter().zip(agg.aggr_expr()).enumerate() {
            finalize.push(if a.is_distinct() {
                if a.field().data_type() != &DataType::Int64 {
                    return not_impl_err!("`{}` returns {}, not Int64", a.name(), a.field().data_type());
                }
                Finalize::ListLength(pos)
            } else if *kind == AggKind::Avg {
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
                        return not_impl_err!("`{}` returns {} but its state is {have}", a.name(), want.data_type());
                    }
                }
            }
        } else if state_schema.fields().len() != out_schema.fields().len() {
            return not_impl_err!("the partial aggregate's output is not its group columns then its states");
        }
        Ok(AggregateLayout {
            upload,
            upload_schema,
            host_evaluated,
            groups: k,
            first,
            merge,
            first_distinct,
            merge_distinct,
            distinct_states,
            state_schema,
            final_output,
            finalize,
        })
    }
}

/// Whether the group keys `agg` reads sorted (its input order mode) are all constant in its
/// input (`p_brand1` under `WHERE p_brand1 = 'MFGR#2221'`, SSB q2.3): a hash group-by then
/// gives the same groups, and the output order the plan counts on holds in any row order. An
/// aggregate over input truly sorted on a key streams its groups in that order, which the GPU
/// does not keep.
fn sorted_keys_are_constant(agg: &AggregateExec) -> bool {
    let sorted: Vec<usize> = match agg.input_order_mode() {
        InputOrderMode::Linear => return true,
        InputOrderMode::PartiallySorted(keys) => keys.clone(),
        InputOrderMode::Sorted => (0..agg.group_expr().expr().len()).collect(),
    };
    let properties = agg.input().equivalence_properties();
    let keys = agg.group_expr().expr();
    sorted.iter().all(|&i| keys.get(i).is_some_and(|(e, _)| properties.is_expr_constant(e).is_some()))
}
