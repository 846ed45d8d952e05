//! Inner GPU joins that would build on their far larger input swap inputs.
//!
//! DataFusion picks a hash join's build side from statistics (its `JoinSelection` rule), and a
//! join or aggregate below passes none up. Over the output of another join it keeps the order
//! the query wrote: SSB q2.1-q2.3 build on `lineorder` joined with every date (60 M rows) and
//! probe with a filtered `part` of a few thousand rows. A GPU join that builds once from every
//! partition (`CollectLeft`) can build on either input, so where the plan's likely sizes (see
//! [`likely_rows`]) put the build side at [`SWAP_RATIO`] times the probe side or more, and at
//! 10 times `gpu.cost.min_rows` or more, and that size is not a guess (at least [`SURE_SHARE`] of
//! the bound the plan's shape gives), the join is rebuilt with its inputs swapped: the small input
//! is collected and hashed, and the large one is probed partition by partition as it comes. The
//! output columns keep their order (the join's projection says where each one comes from).
//! A swapped join is kept only where the rule places it on the GPU and the plan stays sane.

use std::sync::Arc;

use datafusion::common::JoinType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::utils::{JoinFilter, swap_join_projection};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};

use super::eligibility::{bounded_rows, likely_rows};
use super::repartition::{replace, sane};
use crate::exec::GpuHashJoinExec;
use crate::exec::join::gathered_input;

/// How many times the probe side's likely rows the build side's must reach for a swap.
pub const SWAP_RATIO: f64 = 4.0;
/// The share of its bound (see [`bounded_rows`]) the build side's likely rows must reach: a
/// likely size further under its bound rests on a guessed selectivity.
pub const SURE_SHARE: f64 = 0.5;

/// `plan` with every inner `CollectLeft` GPU join whose build side is likely far larger than its
/// probe side (and at least `min_build_rows`: below, one build costs little either way) rebuilt
/// with its inputs swapped, where `place` puts the rebuilt join on the GPU and the plan stays
/// sane. A plan that is not sane to begin with is left alone.
pub fn swap_lopsided_joins(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
    min_build_rows: f64,
    place: &dyn Fn(Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut joins = Vec::new();
    plan.apply(|node| {
        if lopsided(node, min_build_rows).is_some() {
            joins.push(Arc::clone(node));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if joins.is_empty() || !sane(&plan, config) {
        return Ok(plan);
    }
    let mut plan = plan;
    for old in joins {
        let Some(new) = swapped(&old, min_build_rows, place)? else { continue };
        let rewritten = replace(&plan, &old, new)?;
        if sane(&rewritten, config) {
            plan = rewritten;
        }
    }
    Ok(plan)
}

/// When `node` is a GPU join to swap: its `HashJoinExec`, the rows its build side and its probe
/// side likely have, and the build side's rows as the probe side will read them (without the
/// `CoalescePartitionsExec` that gathers them for the build, so they are probed in parallel).
fn lopsided(
    node: &Arc<dyn ExecutionPlan>,
    min_build_rows: f64,
) -> Option<(&HashJoinExec, f64, f64, &Arc<dyn ExecutionPlan>)> {
    let g = node.downcast_ref::<GpuHashJoinExec>()?;
    let hj = g.original().downcast_ref::<HashJoinExec>()?;
    if *hj.join_type() != JoinType::Inner || *hj.partition_mode() != PartitionMode::CollectLeft {
        return None;
    }
    let build = gathered_input(hj.left()).unwrap_or(hj.left());
    let (b, p) = (likely_rows(build)?, likely_rows(hj.right())?);
    // The build side's size must not be a guess: a filter below it whose selectivity DataFusion
    // guesses (its default) leaves its likely rows far under the bound the plan's shape gives.
    // Such a guess is often far too large (SSB q3.x: 12 M likely, 476 K built), and the swapped
    // join then hands the operators above its output in many small partitions: q3.x ran twice
    // as slow swapped.
    let bound = bounded_rows(build)? as f64;
    (b >= min_build_rows && b >= SWAP_RATIO * p && b >= SURE_SHARE * bound).then_some((hj, b, p, build))
}

/// The GPU join `old` rebuilt with its inputs swapped and placed by `place`; `None` when it is not
/// one to swap or `place` does not put the rebuilt join on the GPU.
fn swapped(
    old: &Arc<dyn ExecutionPlan>,
    min_build_rows: f64,
    place: &dyn Fn(Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some((hj, build_rows, probe_rows, build)) = lopsided(old, min_build_rows) else { return Ok(None) };
    let (left_len, right_len) = (hj.left().schema().fields().len(), hj.right().schema().fields().len());
    // The output columns in the join's order, read from the swapped inputs.
    let all: Vec<usize> = (0..left_len + right_len).collect();
    let projection = hj.projection.as_deref().map(<[usize]>::to_vec).unwrap_or(all);
    let projection = swap_join_projection(left_len, right_len, Some(&projection), hj.join_type());
    let on = hj.on().iter().map(|(l, r)| (Arc::clone(r), Arc::clone(l))).collect();
    let join = hj
        .builder()
        .with_new_children(vec![Arc::clone(hj.right()), Arc::clone(build)])?
        .with_on(on)
        .with_filter(hj.filter().map(JoinFilter::swap))
        .with_projection(projection)
        .reset_state()
        .build_exec()?;
    let placed = place(join)?;
    let Some(g) = placed.downcast_ref::<GpuHashJoinExec>() else { return Ok(None) };
    let note = format!(
        "the build side was likely {:.0} rows and the probe side {:.0}: the smaller one is built",
        build_rows, probe_rows
    );
    Ok(Some(Arc::new(g.with_swap_note(note))))
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit};
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::{ExecutionPlanProperties, displayable};

    use super::*;
    use crate::config::GpuConfig;
    use crate::testing::{hash_join_on_first, memory_kv};

    /// A GPU join of `build` and `probe` rows on their keys (its likely output: the probe's rows).
    fn gpu_join(l: Arc<dyn ExecutionPlan>, r: Arc<dyn ExecutionPlan>, mode: PartitionMode) -> Arc<dyn ExecutionPlan> {
        let cfg = GpuConfig::default();
        Arc::new(GpuHashJoinExec::try_new(hash_join_on_first(l, r, JoinType::Inner, None, mode), &cfg).unwrap())
    }

    /// SSB q2's shape: a join's large output built and a small table probed swap inputs; the
    /// output keeps its columns in order, the large side is probed in its partitions (no
    /// gathering), and a join already built on its small side, or under the size floor, stays.
    #[test]
    fn joins_that_build_on_their_far_larger_side_swap_inputs() {
        let cfg = GpuConfig::default();
        let place = |n: Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
            Ok(Arc::new(GpuHashJoinExec::try_new(n, &cfg)?))
        };
        let config = ConfigOptions::default();
        let large = gpu_join(memory_kv(1_000, 2), memory_kv(400_000, 4), PartitionMode::CollectLeft);
        let gathered: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::clone(&large)));
        let plan = gpu_join(Arc::clone(&gathered), memory_kv(5_000, 4), PartitionMode::CollectLeft);
        let out = swap_lopsided_joins(Arc::clone(&plan), &config, 100_000.0, &place).unwrap();
        let shown = displayable(out.as_ref()).indent(true).to_string();
        assert!(
            shown.contains("inputs swapped (the build side was likely 400000 rows and the probe side 5000"),
            "{shown}"
        );
        assert_eq!(out.schema(), plan.schema(), "{shown}");
        let g = out.downcast_ref::<GpuHashJoinExec>().expect("a GPU join on top");
        let hj = g.original().downcast_ref::<HashJoinExec>().unwrap();
        assert_eq!(hj.left().output_partitioning().partition_count(), 4, "{shown}");
        assert!(Arc::ptr_eq(hj.right(), &large), "the large side is probed without its gathering\n{shown}");
        assert!(sane(&out, &config));
        // Built on the small side already, or under the floor: left as it is.
        let small_build = gpu_join(memory_kv(5_000, 4), Arc::clone(&large), PartitionMode::CollectLeft);
        let kept = swap_lopsided_joins(Arc::clone(&small_build), &config, 100_000.0, &place).unwrap();
        assert!(Arc::ptr_eq(&kept, &small_build));
        let kept = swap_lopsided_joins(Arc::clone(&plan), &config, 1_000_000.0, &place).unwrap();
        assert!(Arc::ptr_eq(&kept, &plan));
        // A build side whose size rests on a guessed selectivity (a filter DataFusion has no
        // column statistics for) stays where it is.
        let predicate = binary(col("k", &large.schema()).unwrap(), Operator::Gt, lit(5i64), &large.schema()).unwrap();
        let guessed: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, Arc::clone(&large)).unwrap());
        assert!(likely_rows(&guessed).unwrap() < SURE_SHARE * bounded_rows(&guessed).unwrap() as f64);
        let gathered: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(guessed));
        let plan = gpu_join(gathered, memory_kv(5_000, 4), PartitionMode::CollectLeft);
        let kept = swap_lopsided_joins(Arc::clone(&plan), &config, 10_000.0, &place).unwrap();
        assert!(Arc::ptr_eq(&kept, &plan));
    }
}
