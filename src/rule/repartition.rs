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
pub(super) fn sane(plan: &Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> bool {
    plan.apply(|node| {
        check_plan_sanity(node, &config.optimizer)?;
        Ok(TreeNodeRecursion::Continue)
    })
    .is_ok()
}

/// `plan` with the node `target` (by identity) replaced by `with`.
pub(super) fn replace(
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

/// How [`remove_join_repartitions`] reprices a GPU join it rebuilds in `CollectLeft` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebuilt {
    /// Read around its own hash repartitions: kept only when the model prefers it.
    AroundRepartitions,
    /// Rebuilt because the GPU join below it was (its inputs no longer partitioned alike): kept
    /// whatever its own estimate, as the alternative is to keep the exchange below, which that
    /// join's repricing already found dearer. Priced again for EXPLAIN and the run-time choice.
    WithJoinBelow,
}

/// `plan` with every Partitioned GPU join over hash repartitions reading their inputs instead,
/// top down, each kept only if the plan stays sane: directly, or with the join's output
/// repartitioned by its old partitioning where a node above needs it. Where that node is a
/// Partitioned GPU join, restoring the partitioning would move all of the output through the
/// host (TPC-H q18: 60 M rows, 2.3x slower), so that join is rebuilt in `CollectLeft` mode too
/// (one build from every partition needs no co-partitioned inputs), and so on upwards. A plan
/// that is not sane to begin with is left alone.
///
/// `reprice` gives the cost model's view of each new join: one build of all the build rows is
/// not the 16 per-partition builds the join was priced for, so its algorithm is chosen again
/// (and each build's run-time choice starts from that shape). `None` keeps the Partitioned
/// join: the model expects the CPU to beat the join in its new shape.
pub fn remove_join_repartitions(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
    reprice: &dyn Fn(GpuHashJoinExec, Rebuilt) -> Option<GpuHashJoinExec>,
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
        let Some(new) = reprice(new, Rebuilt::AroundRepartitions) else { continue };
        match with_rebuilt_join(&plan, &old, Arc::new(new), config, reprice)? {
            Some(rewritten) => plan = rewritten,
            None => log::debug!(
                "join kept Partitioned: no sane plan reads it around its repartitions: {}",
                datafusion::physical_plan::displayable(old.as_ref()).one_line()
            ),
        }
    }
    Ok(plan)
}

/// `plan` with the GPU join `old` replaced by `new`, its rebuilt `CollectLeft` form, if the plan
/// stays sane: directly; with the Partitioned GPU join above rebuilt around it (recursively);
/// or with `old`'s hash partitioning restored above `new` for any other parent. `None` when
/// none of these is sane.
fn with_rebuilt_join(
    plan: &Arc<dyn ExecutionPlan>,
    old: &Arc<dyn ExecutionPlan>,
    new: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
    reprice: &dyn Fn(GpuHashJoinExec, Rebuilt) -> Option<GpuHashJoinExec>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let direct = replace(plan, old, Arc::clone(&new))?;
    if sane(&direct, config) {
        return Ok(Some(direct));
    }
    let parent = parent_of(plan, old)?;
    if let Some(p) = &parent
        && let Some(above) = p.downcast_ref::<GpuHashJoinExec>()
    {
        // A GPU join above reads this join's output on the device: it builds from every
        // partition too, rather than the output going down to be hashed and up again.
        let Some(rebuilt) = above.with_rebuilt_child((old, &new))? else { return Ok(None) };
        let Some(rebuilt) = reprice(rebuilt, Rebuilt::WithJoinBelow) else { return Ok(None) };
        return with_rebuilt_join(plan, p, Arc::new(rebuilt), config, reprice);
    }
    let partitioning = old.output_partitioning().clone();
    if !matches!(partitioning, Partitioning::Hash(..)) {
        return Ok(None);
    }
    let restored = Arc::new(RepartitionExec::try_new(new, partitioning)?);
    let wrapped = replace(plan, old, restored)?;
    Ok(sane(&wrapped, config).then_some(wrapped))
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
        let reprice = |g: GpuHashJoinExec, _: Rebuilt| {
            let node = Arc::clone(g.original());
            join_estimate(&g, &node, &cfg, &profile, None, None).map(|e| g.with_estimate(e))
        };
        let out = remove_join_repartitions(Arc::clone(&plan), &ConfigOptions::default(), &reprice).unwrap();
        let join = out.downcast_ref::<GpuHashJoinExec>().expect("the join stays on top");
        let shape = join.estimate().expect("priced again").shape;
        assert_eq!((shape.builds, shape.build_rows), (1.0, 400_000.0));
        assert!(join.original().children().iter().all(|c| c.downcast_ref::<RepartitionExec>().is_none()));
        // No price for the new shape: the Partitioned join stays as it was.
        let kept = remove_join_repartitions(Arc::clone(&plan), &ConfigOptions::default(), &|_, _| None).unwrap();
        assert!(Arc::ptr_eq(&kept, &plan));
    }

    /// A Partitioned GPU join over two others (TPC-H q17's and q18's shape: the join's inputs
    /// are partitioned by DataFusion's joins below, not by repartitions of its own): reading a
    /// lower join around its repartitions leaves the upper join's inputs partitioned unalike, so
    /// the upper join is rebuilt in CollectLeft mode too, instead of the lower join keeping its
    /// repartitions; without a price for the upper join's new shape all stay as they were.
    #[test]
    fn a_gpu_join_over_a_rebuilt_gpu_join_builds_from_every_partition_too() {
        let cfg = GpuConfig::default();
        let lower = |build: i64, probe: i64| -> Arc<dyn ExecutionPlan> {
            let join = hash_join_on_first(
                repartitioned(build, 4),
                repartitioned(probe, 4),
                JoinType::Inner,
                None,
                PartitionMode::Partitioned,
            );
            Arc::new(GpuHashJoinExec::try_new(join, &cfg).unwrap())
        };
        for join_type in [JoinType::Inner, JoinType::LeftSemi, JoinType::Left] {
            let upper = hash_join_on_first(
                lower(4_000, 40_000),
                lower(800, 8_000),
                join_type,
                None,
                PartitionMode::Partitioned,
            );
            let plan: Arc<dyn ExecutionPlan> = Arc::new(GpuHashJoinExec::try_new(upper, &cfg).unwrap());
            assert!(sane(&plan, &ConfigOptions::default()));
            let out = remove_join_repartitions(Arc::clone(&plan), &ConfigOptions::default(), &|g, _| Some(g)).unwrap();
            let shown = datafusion::physical_plan::displayable(out.as_ref()).indent(true).to_string();
            assert!(!shown.contains("RepartitionExec"), "{join_type}: a repartition is left\n{shown}");
            assert_eq!(shown.matches("GpuHashJoinExec: mode=CollectLeft").count(), 3, "{shown}");
            assert!(shown.contains("build: none, its GPU join reads its own inputs around theirs"), "{shown}");
            assert!(sane(&out, &ConfigOptions::default()));
            // The upper join's new shape has no price: the lower join keeps its repartitions.
            let kept = remove_join_repartitions(Arc::clone(&plan), &ConfigOptions::default(), &|g, why| {
                (why == Rebuilt::AroundRepartitions).then_some(g)
            })
            .unwrap();
            assert!(Arc::ptr_eq(&kept, &plan), "{join_type}");
        }
    }
}
