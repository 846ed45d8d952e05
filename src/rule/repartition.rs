//! Partitioned GPU joins without the hash repartitions below them.
//!
//! DataFusion plans a `Partitioned` hash join behind two hash `RepartitionExec`s so that each of
//! its 16 (say) CPU threads joins one key range. One GPU does every partition's join anyway, so
//! the exchange only costs: the CPU hashes and redistributes both inputs (in TPC-H that took
//! longer than DataFusion's whole query), and a GPU input crosses PCIe twice for it. Such a join
//! runs in `CollectLeft` mode instead (see [`GpuHashJoinExec::without_repartitions`]).
//!
//! Its output is then partitioned like its probe input, not by the join keys. Where a node above
//! relies on the keys' partitioning (a `SinglePartitioned` aggregate, a partitioned join over
//! it, through projections and filters), the original partitioning is restored with a hash
//! `RepartitionExec` of the join's output (usually far smaller than its inputs): the same hash
//! of the same values, so every row lands in the partition it had. Which nodes rely on it is
//! settled by DataFusion's own plan sanity check over the rewritten plan, not by rules of ours.
//! Not below another GPU join, though: that one reads the output on the device, and restoring
//! the partitioning would move all of it through the host. Below a `SinglePartitioned` GPU
//! aggregate the restored repartition is replaced too, where it can be: the aggregate is split as
//! DataFusion plans one over unpartitioned input, into Partial and FinalPartitioned stages whose
//! exchange runs on the device (see [`split_aggregates_over_device_input`]).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::sanity_checker::check_plan_sanity;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, InputOrderMode, Partitioning};

use crate::exec::join::removable_repartition;
use crate::exec::{GpuAggregateExec, GpuHashJoinExec, as_gpu_exec};

/// Whether every node of `plan` has the distribution and ordering its parent needs.
fn sane(plan: &Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> bool {
    plan.apply(|node| {
        check_plan_sanity(node, &config.optimizer)?;
        Ok(TreeNodeRecursion::Continue)
    })
    .is_ok()
}

/// `plan` with the node `target` (by identity) replaced by `with`.
fn replace(
    plan: &Arc<dyn ExecutionPlan>,
    target: &Arc<dyn ExecutionPlan>,
    with: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut with = Some(with);
    Arc::clone(plan)
        .transform_down(|node| match Arc::ptr_eq(&node, target) {
            true => match with.take() {
                Some(w) => Ok(Transformed::new(w, true, TreeNodeRecursion::Jump)),
                None => Ok(Transformed::no(node)),
            },
            false => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
}

/// The node of `plan` that has `target` (by identity) as a child.
fn parent_of(plan: &Arc<dyn ExecutionPlan>, target: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut found = None;
    plan.apply(|node| {
        if node.children().iter().any(|c| Arc::ptr_eq(c, target)) {
            found = Some(Arc::clone(node));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// `plan` with every Partitioned GPU join over hash repartitions reading their inputs instead,
/// top down, each kept only if the plan stays sane (with the join's output repartitioned by its
/// old partitioning when needed, except below another GPU join). A plan that is not sane to
/// begin with is left alone.
///
/// `reprice` gives the cost model's view of each new join: one build of all the build rows is
/// not the 16 per-partition builds the join was priced for, so its algorithm is chosen again
/// (and each build's run-time choice starts from that shape). `None` keeps the Partitioned
/// join: the model expects the CPU to beat the join in its new shape.
pub fn remove_join_repartitions(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
    reprice: &dyn Fn(GpuHashJoinExec) -> Option<GpuHashJoinExec>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut joins = Vec::new();
    plan.apply(|node| {
        if node.downcast_ref::<GpuHashJoinExec>().is_some() {
            joins.push(Arc::clone(node));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if joins.is_empty() {
        return Ok(plan);
    }
    if !sane(&plan, config) {
        log::debug!("plan fails DataFusion's sanity check before removing join repartitions; left as it is");
        return Ok(plan);
    }
    let mut plan = plan;
    for old in joins {
        let Some(join) = old.downcast_ref::<GpuHashJoinExec>() else { continue };
        let Some(new) = join.without_repartitions()? else { continue };
        let Some(new) = reprice(new) else { continue };
        let new: Arc<dyn ExecutionPlan> = Arc::new(new);
        let direct = replace(&plan, &old, Arc::clone(&new))?;
        if sane(&direct, config) {
            plan = direct;
            continue;
        }
        // A GPU join above reads this join's output on the device: a restoring repartition
        // would download all of it and hash it on the CPU (TPC-H q18: 60 M rows, 2.3x slower).
        if parent_of(&plan, &old)?.is_some_and(|p| p.downcast_ref::<GpuHashJoinExec>().is_some()) {
            continue;
        }
        let partitioning = old.output_partitioning().clone();
        if !matches!(partitioning, Partitioning::Hash(..)) {
            continue;
        }
        let restored = Arc::new(RepartitionExec::try_new(new, partitioning)?);
        let wrapped = replace(&plan, &old, restored)?;
        if sane(&wrapped, config) {
            plan = wrapped;
        }
    }
    Ok(plan)
}

/// `plan` with each `SinglePartitioned` GPU aggregate that reads a hash repartition of a GPU
/// operator's output (a GPU join read around its own repartitions, its partitioning restored for
/// the aggregate) split into a Partial aggregate over the GPU operator, a hash repartition on the
/// group columns and a FinalPartitioned aggregate: the plan DataFusion makes for unpartitioned
/// input. `place` places each new aggregate as the rule does; the split is kept only when both
/// land on the GPU with the exchange between them on the device (so the GPU operator's output no
/// longer crosses PCIe twice to be hashed on the CPU), the output schema is the same and the plan
/// stays sane.
pub fn split_aggregates_over_device_input(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
    place: &dyn Fn(Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut candidates = Vec::new();
    plan.apply(|node| {
        if split_candidate(node).is_some() {
            candidates.push(Arc::clone(node));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if candidates.is_empty() || !sane(&plan, config) {
        return Ok(plan);
    }
    let mut plan = plan;
    for old in candidates {
        let Some(split) = split_one(&old, place)? else { continue };
        if split.schema() != old.schema() {
            continue;
        }
        let new = replace(&plan, &old, split)?;
        if sane(&new, config) {
            plan = new;
        }
    }
    Ok(plan)
}

/// When `node` is a GPU aggregate [`split_aggregates_over_device_input`] splits (SinglePartitioned,
/// its input not fused, over a hash repartition of a GPU exec's output): its `AggregateExec`
/// and that repartition.
fn split_candidate(node: &Arc<dyn ExecutionPlan>) -> Option<(&AggregateExec, &RepartitionExec)> {
    let g = node.downcast_ref::<GpuAggregateExec>()?;
    if g.fused_input().is_some() || g.partial_stage().is_some() {
        return None;
    }
    let a = g.original().downcast_ref::<AggregateExec>()?;
    if *a.mode() != AggregateMode::SinglePartitioned {
        return None;
    }
    let r = removable_repartition(a.input())?;
    as_gpu_exec(r.input()).is_some().then_some((a, r))
}

/// The Partial, exchange and Final of [`split_aggregates_over_device_input`] in place of the GPU
/// aggregate `old`, placed; `None` when the aggregate cannot be split or the stages would not
/// both run on the GPU with the exchange on the device.
fn split_one(
    old: &Arc<dyn ExecutionPlan>,
    place: &dyn Fn(Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some((a, r)) = split_candidate(old) else { return Ok(None) };
    // Grouping sets, a limit and ordered input change what the stages must do: left alone.
    if !a.group_expr().is_single() || a.limit_options().is_some() || *a.input_order_mode() != InputOrderMode::Linear {
        return Ok(None);
    }
    let partitions = r.partitioning().partition_count();
    let (aggr, filters, schema) = (a.aggr_expr().to_vec(), a.filter_expr().to_vec(), a.input_schema());
    let partial = AggregateExec::try_new(
        AggregateMode::Partial,
        a.group_expr().clone(),
        aggr.clone(),
        filters.clone(),
        Arc::clone(r.input()),
        Arc::clone(&schema),
    )?;
    let final_groups = partial.group_expr().as_final();
    let keys = final_groups.expr().iter().map(|(e, _)| Arc::clone(e)).collect();
    let partial = place(Arc::new(partial))?;
    if partial.downcast_ref::<GpuAggregateExec>().is_none() {
        return Ok(None);
    }
    let exchange = Arc::new(RepartitionExec::try_new(partial, Partitioning::Hash(keys, partitions))?);
    let last = AggregateExec::try_new(AggregateMode::FinalPartitioned, final_groups, aggr, filters, exchange, schema)?;
    let last = place(Arc::new(last))?;
    Ok(last.downcast_ref::<GpuAggregateExec>().is_some_and(|g| g.partial_stage().is_some()).then_some(last))
}

#[cfg(test)]
mod tests {
    use datafusion::common::JoinType;
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::PhysicalExpr;
    use datafusion::physical_plan::joins::PartitionMode;

    use super::*;
    use crate::config::GpuConfig;
    use crate::cost::Profile;
    use crate::rule::costing::join_estimate;
    use crate::testing::{hash_join_on_first, memory_kv};

    /// `rows` rows of (k, v) in `parts` partitions, hash-repartitioned on k into 4.
    fn repartitioned(rows: i64, parts: i64) -> Arc<dyn ExecutionPlan> {
        let key = Arc::new(Column::new("k", 0)) as Arc<dyn PhysicalExpr>;
        Arc::new(RepartitionExec::try_new(memory_kv(rows, parts), Partitioning::Hash(vec![key], 4)).unwrap())
    }

    /// A Partitioned join is priced for 4 builds of a quarter of the build rows each; read
    /// around its repartitions it makes one build of all of them, and the estimate (the shape
    /// each build's run-time choice starts from) says so. A join the model then expects the CPU
    /// to win keeps its repartitions.
    #[test]
    fn joins_without_repartitions_are_priced_for_one_build() {
        let node = hash_join_on_first(
            repartitioned(400_000, 4),
            repartitioned(4_000_000, 4),
            JoinType::Inner,
            None,
            PartitionMode::Partitioned,
        );
        let cfg = GpuConfig::default();
        let profile = Arc::new(Profile::h100());
        let exec = GpuHashJoinExec::try_new(Arc::clone(&node), &cfg).unwrap();
        let e = join_estimate(&exec, &node, &cfg, &profile, None, None).expect("memory sources have row counts");
        assert_eq!((e.shape.builds, e.shape.build_rows), (4.0, 100_000.0));
        let plan: Arc<dyn ExecutionPlan> = Arc::new(exec.with_estimate(e));
        let reprice = |g: GpuHashJoinExec| {
            let node = Arc::clone(g.original());
            join_estimate(&g, &node, &cfg, &profile, None, None).map(|e| g.with_estimate(e))
        };
        let out = remove_join_repartitions(Arc::clone(&plan), &ConfigOptions::default(), &reprice).unwrap();
        let join = out.downcast_ref::<GpuHashJoinExec>().expect("the join stays on top");
        let shape = join.estimate().expect("priced again").shape;
        assert_eq!((shape.builds, shape.build_rows), (1.0, 400_000.0));
        assert!(join.original().children().iter().all(|c| c.downcast_ref::<RepartitionExec>().is_none()));
        // No price for the new shape: the Partitioned join stays as it was.
        let kept = remove_join_repartitions(Arc::clone(&plan), &ConfigOptions::default(), &|_| None).unwrap();
        assert!(Arc::ptr_eq(&kept, &plan));
    }
}
