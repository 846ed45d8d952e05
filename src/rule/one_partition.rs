//! GPU operators over cached tables run as one partition (`gpu.table_cache.one_partition`).
//!
//! A cached table that fits one device batch reaches its GPU parents in one device partition
//! already ([`GpuCachedScanExec`]); the plan around it still has DataFusion's partitions, so each
//! GPU operator starts that many partitions, the empty ones making empty states, waiting on the
//! builds and feeding round-robin repartitions. This pass takes each region of GPU operators whose
//! every leaf is such a scan (or a node of one partition) and plans it as one partition: the
//! scans hand out the whole table as their one partition, the repartitions and coalesces inside
//! the region go (one partition needs no exchange), and each operator is rebuilt over its new
//! inputs so that its properties follow them. Where a CPU operator reads the region, the
//! partitioning it was planned on is restored (a hash repartition for a hash partitioning, a
//! round-robin one otherwise); a GPU aggregate with a device exchange splits its own output as
//! planned and needs none.
//!
//! Regions where any node keeps an order are left alone, as are GPU joins planned out of core.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, Partitioning};

use crate::exec::{GpuAggregateExec, GpuCachedScanExec, GpuFilterProjectExec, GpuHashJoinExec};

/// `plan` with each region of GPU operators over one-batch cached tables run as one partition
/// (see the module's text).
pub fn run_cached_regions_in_one_partition(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    rewrite(plan, Reader::Cpu)
}

/// What reads a node's output.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// A CPU operator (or nothing): a region there gets its planned partitioning back.
    Cpu,
    /// A coalesce, which makes one partition of any number: a region there needs no restoring.
    Coalesce,
    /// A GPU operator, on the device: the node is part of that operator's region, not the root
    /// of one.
    Gpu,
}

/// A GPU operator that computes (a join, an aggregate, a filter-project), as opposed to a scan
/// or an upload.
fn computes(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<GpuHashJoinExec>().is_some()
        || node.downcast_ref::<GpuAggregateExec>().is_some()
        || node.downcast_ref::<GpuFilterProjectExec>().is_some()
}

/// `node` with its regions run as one partition, `reader` reading its output.
fn rewrite(node: Arc<dyn ExecutionPlan>, reader: Reader) -> Result<Arc<dyn ExecutionPlan>> {
    if computes(&node)
        && let Some(one) = one_partition(&node)?
    {
        // A region that keeps its planned partitioning (a GPU aggregate's device exchange splits
        // its output as planned) may stand anywhere; one that now has one partition only where a
        // CPU operator (through the restored partitioning) or a coalesce reads it.
        let kept = one.output_partitioning().partition_count() == node.output_partitioning().partition_count();
        match reader {
            _ if kept => return Ok(one),
            Reader::Cpu => return restore(one, &node),
            Reader::Coalesce => return Ok(one),
            Reader::Gpu => {}
        }
    }
    let below = if crate::exec::as_gpu_exec(&node).is_some() {
        Reader::Gpu
    } else if node.downcast_ref::<CoalescePartitionsExec>().is_some_and(|c| c.fetch().is_none()) {
        Reader::Coalesce
    } else {
        Reader::Cpu
    };
    let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    let mut changed = false;
    let mut new = Vec::with_capacity(children.len());
    for child in &children {
        let child_new = rewrite(Arc::clone(child), below)?;
        changed |= !Arc::ptr_eq(&child_new, child);
        new.push(child_new);
    }
    match changed {
        true => node.replace_children(new, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)),
        false => Ok(node),
    }
}

/// `node` planned as one partition, or `None` when its region cannot be. A GPU aggregate with
/// a device exchange keeps its planned output partitioning (its Partial stage runs as one).
fn one_partition(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if node.output_ordering().is_some() {
        return Ok(None);
    }
    if let Some(scan) = node.downcast_ref::<GpuCachedScanExec>() {
        return Ok(match scan.in_one_partition() {
            Some(one) => Some(Arc::new(one)),
            None => single(node),
        });
    }
    if let Some(r) = node.downcast_ref::<RepartitionExec>() {
        // Inside a region (a GPU operator reads it): one partition needs no exchange.
        return match r.preserve_order() {
            true => Ok(None),
            false => one_partition(r.input()),
        };
    }
    if let Some(c) = node.downcast_ref::<CoalescePartitionsExec>() {
        return match c.fetch() {
            Some(_) => Ok(None),
            None => Ok(one_partition(c.input())?.filter(|one| is_single(one)).or_else(|| single(node))),
        };
    }
    if !computes(node) {
        // Any other node is read as it is, when it has one partition.
        return Ok(single(node));
    }
    if node.downcast_ref::<GpuHashJoinExec>().is_some_and(|j| j.out_of_core().is_some()) {
        return Ok(None);
    }
    let mut children = Vec::new();
    for child in node.children() {
        match one_partition(child)? {
            Some(one) if is_single(&one) => children.push(one),
            _ => return Ok(None),
        }
    }
    let rebuilt: Arc<dyn ExecutionPlan> = if let Some(agg) = node.downcast_ref::<GpuAggregateExec>() {
        Arc::new(agg.over_inputs(children)?)
    } else if let Some(fp) = node.downcast_ref::<GpuFilterProjectExec>() {
        let [input] = <[_; 1]>::try_from(children).map_err(|c: Vec<_>| {
            datafusion::error::DataFusionError::Internal(format!(
                "GpuFilterProjectExec takes one child, not {}",
                c.len()
            ))
        })?;
        Arc::new(fp.over_input(input)?)
    } else {
        // A join's properties are its HashJoinExec's, recomputed over the new children.
        Arc::clone(node).replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?
    };
    let exchange = rebuilt.downcast_ref::<GpuAggregateExec>().is_some_and(GpuAggregateExec::has_device_exchange);
    let planned = node.output_partitioning().partition_count();
    let kept = exchange && rebuilt.output_partitioning().partition_count() == planned;
    Ok((is_single(&rebuilt) || kept).then_some(rebuilt))
}

/// Whether this pass would run `node`'s region as one partition, judged before the rule's later
/// passes: its every leaf a cached scan of one device batch (or a node of one partition) and
/// every node between them a GPU operator, an exchange without order or a filter or projection
/// (which the device takes over with its GPU parent), none keeping an order.
pub fn would_run_in_one_partition(node: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::projection::ProjectionExec;
    if node.output_ordering().is_some() {
        return false;
    }
    if let Some(scan) = node.downcast_ref::<GpuCachedScanExec>() {
        return scan.in_one_partition().is_some() || is_single(node);
    }
    if let Some(r) = node.downcast_ref::<RepartitionExec>() {
        return !r.preserve_order() && would_run_in_one_partition(r.input());
    }
    if let Some(c) = node.downcast_ref::<CoalescePartitionsExec>() {
        return c.fetch().is_none() && would_run_in_one_partition(c.input());
    }
    if node.downcast_ref::<FilterExec>().is_some() || node.downcast_ref::<ProjectionExec>().is_some() {
        return would_run_in_one_partition(node.children()[0]);
    }
    if !computes(node) {
        return is_single(node);
    }
    if node.downcast_ref::<GpuHashJoinExec>().is_some_and(|j| j.out_of_core().is_some()) {
        return false;
    }
    node.children().into_iter().all(would_run_in_one_partition)
}

/// What `side` redistributes when it is a round-robin `RepartitionExec` that this pass will drop
/// (`gpu.table_cache.one_partition`, its region run as one partition). DataFusion spreads a small
/// cached table's filter over the partitions so (TPC-H q7's second nation filter, a join's probe
/// side; q8's region join reads another join so). The rule prices and fuses what is below it as
/// the device will read it; elsewhere such a repartition stays, and a GPU input under it crosses
/// the host.
pub fn round_robin_dropped<'a>(
    side: &'a Arc<dyn ExecutionPlan>,
    cfg: &crate::config::GpuConfig,
) -> Option<&'a Arc<dyn ExecutionPlan>> {
    let r = side.downcast_ref::<RepartitionExec>()?;
    let dropped = cfg.table_cache_one_partition
        && !r.preserve_order()
        && matches!(r.partitioning(), Partitioning::RoundRobinBatch(_))
        && would_run_in_one_partition(side);
    dropped.then(|| r.input())
}

/// Whether `plan` has one output partition.
fn is_single(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.output_partitioning().partition_count() == 1
}

/// `node` itself when it has one partition.
fn single(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    is_single(node).then(|| Arc::clone(node))
}

/// `one` (a region run as one partition) with the partitioning `planned` had, for the CPU
/// operator that reads it.
fn restore(one: Arc<dyn ExecutionPlan>, planned: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let want = planned.output_partitioning();
    if one.output_partitioning().partition_count() == want.partition_count() {
        return Ok(one);
    }
    let partitioning = match want {
        Partitioning::Hash(exprs, n) => Partitioning::Hash(exprs.clone(), *n),
        other => Partitioning::RoundRobinBatch(other.partition_count()),
    };
    Ok(Arc::new(RepartitionExec::try_new(one, partitioning)?))
}
