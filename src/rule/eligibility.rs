//! Whether an operator can run on the GPU, and if not, why: each check returns the reasons that
//! EXPLAIN prints on the operator's `CpuFallbackExec`.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::JoinType;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;

pub use crate::columns::row_width;
pub use crate::exec::fallback::FallbackReason;
use crate::exec::statistics::statistics;
pub use crate::exec::statistics::{estimated_rows, exact_rows, with_shared_statistics};
use crate::exec::{GpuAggregateExec, GpuHashJoinExec};
use crate::join::filter::generate as generate_filter;
use crate::primitives::keys::KeyColumnKind;
use crate::primitives::materialize::can_gather;

/// Key types the GPU join and group-by handle: integers, dates, times, timestamps, durations,
/// Decimal128, Boolean, strings and binary, and dictionaries of these (the one list is
/// [`KeyColumnKind::of`], which the device's key preparation uses).
pub fn is_supported_key_type(dt: &DataType) -> bool {
    KeyColumnKind::of(dt).is_ok()
}

/// Output rows of `plan` for the cost model: DataFusion's estimate, else a bound from the
/// plan's shape. Statistics give no estimate for a join whose inputs have no column statistics
/// (in-memory tables have none, and a join or aggregate below passes none up), yet such a join
/// is priced like any other: an equi-join's output as its larger input's (a foreign-key join's
/// output is its probe side), a semi, anti or mark join's as the side it returns, an
/// aggregate's as its input's (at most one group per row), and a filter, projection, exchange
/// or sort as its input's.
pub fn bounded_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    bounded_rows_at(plan, 0)
}

fn bounded_rows_at(plan: &Arc<dyn ExecutionPlan>, depth: usize) -> Option<usize> {
    if let Some(rows) = estimated_rows(plan) {
        return Some(rows);
    }
    if depth > 64 {
        return None;
    }
    let node = as_planned(plan);
    if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        let (l, r) = (|| bounded_rows_at(join.left(), depth + 1), || bounded_rows_at(join.right(), depth + 1));
        return match join.join_type() {
            JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => l(),
            JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => r(),
            _ => Some(l()?.max(r()?)),
        };
    }
    match node.children().as_slice() {
        [child] if passes_bound(node) => bounded_rows_at(child, depth + 1),
        _ => None,
    }
}

/// Likely output rows of `plan` for the cost model where DataFusion has no estimate: tighter
/// than [`bounded_rows`], not a bound. An inner equi-join's output is its probe side's rows
/// times the fraction of its build side's base table that the build keeps (the build's key is
/// that table's key, as in a foreign-key join: System R's |L||R|/V(L.k) with V(L.k) = |base
/// L|), so a join with a filtered dimension keeps that filter's share of the probe; a filter
/// DataFusion estimates at all of its input (no column min/max) keeps its default selectivity;
/// the rest as [`bounded_rows`] has them.
pub fn likely_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<f64> {
    likely_rows_at(plan, 0)
}

fn likely_rows_at(plan: &Arc<dyn ExecutionPlan>, depth: usize) -> Option<f64> {
    if depth > 64 {
        return None;
    }
    let node = as_planned(plan);
    if let Some(filter) = node.downcast_ref::<FilterExec>() {
        let input = likely_rows_at(filter.input(), depth + 1)?;
        return Some(match estimated_rows(node) {
            Some(rows) if (rows as f64) < input => rows as f64,
            _ => input * f64::from(filter.default_selectivity()) / 100.0,
        });
    }
    // Through what keeps every row, to a filter below (whose estimate they pass up).
    #[allow(deprecated)] // CoalesceBatchesExec: as in `passes_bound`
    let keeps_rows = node.downcast_ref::<ProjectionExec>().is_some()
        || node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some_and(|c| c.fetch().is_none());
    if let (true, [child]) = (keeps_rows, node.children().as_slice()) {
        return likely_rows_at(child, depth + 1);
    }
    if let Some(rows) = estimated_rows(plan) {
        return Some(rows as f64);
    }
    if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        let (l, r) = (|| likely_rows_at(join.left(), depth + 1), || likely_rows_at(join.right(), depth + 1));
        return match join.join_type() {
            JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => l(),
            JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => r(),
            JoinType::Inner => {
                let base = base_rows(join.left(), depth + 1)?.max(1.0);
                Some(r()? * (l()? / base).min(1.0))
            }
            _ => Some(l()?.max(r()?)),
        };
    }
    match node.children().as_slice() {
        [child] if passes_bound(node) => likely_rows_at(child, depth + 1),
        _ => None,
    }
}

/// The rows of the table (or join) below `side`'s filters, projections and exchanges.
fn base_rows(side: &Arc<dyn ExecutionPlan>, depth: usize) -> Option<f64> {
    let mut node = side;
    loop {
        match node.children().as_slice() {
            [child] if node.downcast_ref::<HashJoinExec>().is_none() && passes_bound(node) => node = child,
            _ => break,
        }
    }
    likely_rows_at(node, depth + 1)
}

/// `plan` as DataFusion planned it: a GPU join's `HashJoinExec`, anything else itself.
fn as_planned(plan: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    match plan.downcast_ref::<GpuHashJoinExec>() {
        Some(g) => g.original(),
        None => plan,
    }
}

/// Whether `node` outputs at most as many rows as its one input: an aggregate (at most a group
/// per row), a filter, a projection, an exchange or a sort.
#[allow(deprecated)] // CoalesceBatchesExec: DataFusion 55 no longer plans it; a plan built by hand may
fn passes_bound(node: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
    node.downcast_ref::<CoalesceBatchesExec>().is_some()
        || node.downcast_ref::<AggregateExec>().is_some()
        || node.downcast_ref::<GpuAggregateExec>().is_some()
        || node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some()
        || node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some()
        || node.downcast_ref::<SortPreservingMergeExec>().is_some()
}

fn check_min_rows(rows: Option<usize>, min_rows: usize, out: &mut Vec<FallbackReason>) {
    if let Some(rows) = rows
        && rows < min_rows
    {
        out.push(FallbackReason::BelowMinRows { rows, min_rows });
    }
}

/// A key must be a plain column of a supported type.
fn check_key(what: &str, expr: &Arc<dyn PhysicalExpr>, schema: &Schema, out: &mut Vec<FallbackReason>) {
    let mut found = Vec::new();
    check_key_into(what, expr, schema, &mut found);
    // Both sides of a join often name the same column: say each reason once.
    for r in found {
        if !out.contains(&r) {
            out.push(r);
        }
    }
}

fn check_key_into(what: &str, expr: &Arc<dyn PhysicalExpr>, schema: &Schema, out: &mut Vec<FallbackReason>) {
    if expr.downcast_ref::<Column>().is_none() {
        out.push(FallbackReason::UnsupportedExpression { what: what.to_string(), expr: expr.to_string() });
        return;
    }
    match expr.data_type(schema) {
        Ok(dt) if is_supported_key_type(&dt) => {}
        Ok(dt) => out.push(FallbackReason::UnsupportedType { what: format!("{what} {expr}"), data_type: dt }),
        Err(e) => out.push(FallbackReason::UnsupportedExpression {
            what: format!("{what} (type unknown: {e})"),
            expr: expr.to_string(),
        }),
    }
}

/// Reasons a hash join stays on the CPU, besides the device (empty: it can run on the GPU).
pub fn join_reasons(join: &HashJoinExec, min_rows: usize) -> Vec<FallbackReason> {
    let mut out = Vec::new();
    let (ls, rs) = (join.left().schema(), join.right().schema());
    for (l, r) in join.on() {
        check_key("join key", l, &ls, &mut out);
        check_key("join key", r, &rs, &mut out);
        if let (Ok(lt), Ok(rt)) = (l.data_type(&ls), r.data_type(&rs))
            && lt != rt
        {
            out.push(FallbackReason::Unsupported(format!(
                "join keys `{l}` and `{r}` have different types {lt} and {rt}"
            )));
        }
    }
    if let Some(filter) = join.filter()
        && let Err(why) = generate_filter(filter.expression(), filter.schema(), filter.column_indices())
    {
        out.push(FallbackReason::Unsupported(format!(
            "the join filter `{}` cannot run on the GPU: {why}",
            filter.expression()
        )));
    }
    if let Some(fetch) = join.fetch() {
        out.push(FallbackReason::Unsupported(format!("the join has a fetch limit ({fetch})")));
    }
    if *join.partition_mode() == PartitionMode::Auto {
        out.push(FallbackReason::Unsupported("the join's partition mode is not resolved (Auto)".into()));
    }
    for field in join.schema().fields() {
        if !can_gather(field.data_type()) {
            out.push(FallbackReason::UnsupportedType {
                what: format!("output column {}", field.name()),
                data_type: field.data_type().clone(),
            });
        }
    }
    let ordered_types = [JoinType::Inner, JoinType::RightSemi, JoinType::RightAnti, JoinType::RightMark];
    if join.properties().output_ordering().is_some() && !ordered_types.contains(join.join_type()) {
        out.push(FallbackReason::Unsupported(format!(
            "the plan relies on the probe-side order of this {} join, which the GPU join keeps only for \
             Inner, RightSemi, RightAnti and RightMark joins",
            join.join_type()
        )));
    }
    let rows = match (estimated_rows(join.left()), estimated_rows(join.right())) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    check_min_rows(rows, min_rows, &mut out);
    out
}

/// How much device memory a GPU build takes per byte of build input (see
/// [`crate::join::triton::STATE_FACTOR`]).
pub const BUILD_MEMORY_FACTOR: u64 = crate::join::triton::STATE_FACTOR;

/// The reason a join stays on the CPU because its build side would not fit under `limit` bytes of
/// device memory, judged from the plan's statistics (no reason when they give no size).
pub fn build_memory_reason(join: &HashJoinExec, limit: u64) -> Option<FallbackReason> {
    let left = join.left();
    let stats = statistics(left)?;
    let width = row_width(&left.schema());
    let by_rows = stats.num_rows.get_value().map(|r| *r as u64 * width);
    // Batches sliced from one buffer each count the whole buffer in `total_byte_size`: trust the
    // rows when they give less for fixed-width columns.
    let fixed = left.schema().fields().iter().all(|f| f.data_type().primitive_width().is_some());
    let bytes = match (stats.total_byte_size.get_value(), by_rows) {
        (Some(b), Some(r)) if fixed => (*b as u64).min(r),
        (Some(b), _) => *b as u64,
        (None, Some(r)) => r,
        (None, None) => return None,
    };
    // A partitioned build holds one partition of the left side at a time.
    let build_bytes = match join.partition_mode() {
        PartitionMode::Partitioned => bytes / left.properties().output_partitioning().partition_count().max(1) as u64,
        _ => bytes,
    };
    let need_bytes = build_bytes.saturating_mul(BUILD_MEMORY_FACTOR);
    (need_bytes > limit).then_some(FallbackReason::OverMemoryLimit { build_bytes, need_bytes, limit })
}

/// EXPLAIN's words for a join that runs out of core because of `over` (an
/// [`FallbackReason::OverMemoryLimit`]).
pub fn out_of_core_note(over: &FallbackReason) -> String {
    match over {
        FallbackReason::OverMemoryLimit { build_bytes, need_bytes, limit } => {
            let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
            format!(
                "build about {:.1} MiB, state about {:.1} MiB over gpu.memory.limit = {:.1} MiB",
                mib(*build_bytes),
                mib(*need_bytes),
                mib(*limit)
            )
        }
        other => other.to_string(),
    }
}

/// Reasons an aggregate stays on the CPU besides the device and its own layout checks
/// ([`crate::aggregate::layout::AggregateLayout::new`]): empty when it is large enough.
pub fn aggregate_reasons(agg: &AggregateExec, min_rows: usize) -> Vec<FallbackReason> {
    let mut out = Vec::new();
    check_min_rows(estimated_rows(agg.input()), min_rows, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::CpuFallbackExec;

    /// Filters, projections, exchanges and sorts pass their input's bound up (recognised by
    /// type, also when kept on the CPU); a join does not.
    #[test]
    fn pass_through_operators_keep_the_bound() {
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{BinaryExpr, lit};
        use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
        use datafusion::physical_plan::Partitioning;
        use datafusion::physical_plan::projection::ProjectionExpr;

        use crate::testing::{hash_join_on_first, memory_kv};

        let k = |i| Arc::new(Column::new("k", i)) as Arc<dyn PhysicalExpr>;
        // Joined (k, v) with (k, v) or (k): the right side's k, the only column left.
        let join = |l, r| hash_join_on_first(l, r, JoinType::Inner, Some(vec![2]), PartitionMode::CollectLeft);
        let joined = join(memory_kv(10, 1), join(memory_kv(1000, 1), memory_kv(5000, 2)));
        assert!(!passes_bound(&joined), "a join's output is bounded by its inputs, not passed through");
        let predicate = Arc::new(BinaryExpr::new(k(0), Operator::Gt, lit(10i64)));
        let mut chain: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, joined).unwrap());
        let mut passing = vec![Arc::clone(&chain)];
        chain = Arc::new(ProjectionExec::try_new(vec![ProjectionExpr::new(k(0), "k")], chain).unwrap());
        passing.push(Arc::clone(&chain));
        chain = Arc::new(RepartitionExec::try_new(chain, Partitioning::RoundRobinBatch(4)).unwrap());
        passing.push(Arc::clone(&chain));
        let order = LexOrdering::new(vec![PhysicalSortExpr::new_default(k(0))]).unwrap();
        chain = Arc::new(SortExec::new(order.clone(), chain).with_preserve_partitioning(true));
        passing.push(Arc::clone(&chain));
        chain = Arc::new(SortPreservingMergeExec::new(order, chain));
        passing.push(Arc::clone(&chain));
        chain = Arc::new(CoalescePartitionsExec::new(chain));
        passing.push(Arc::clone(&chain));
        for node in &passing {
            assert!(passes_bound(node), "{} should pass its input's bound", node.name());
        }
        // Kept on the CPU with a reason, a node still passes it (downcasts see through).
        let kept = Arc::new(CpuFallbackExec::new(Arc::clone(&passing[0]), vec![])) as Arc<dyn ExecutionPlan>;
        assert!(passes_bound(&kept));
        // The whole chain is bounded (by its estimate when DataFusion has one, else the joins').
        let bound = bounded_rows(&chain).expect("the chain over joins of memory tables is bounded");
        assert!(bound > 0);
    }
}
