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
//! the partitioning would move all of it through the host.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::sanity_checker::check_plan_sanity;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use crate::exec::GpuHashJoinExec;

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
        let profile = Profile::h100();
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
