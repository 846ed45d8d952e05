//! The filters and projections below GPU joins taken onto the device.
//!
//! DataFusion filters and projects a join's inputs on the host (`FilterExec`, `ProjectionExec`),
//! and a GPU join uploads what they leave. Where every expression of such a chain compiles for the
//! device, [`GpuFilterProjectExec`] takes its place: the raw columns go up and generated kernels
//! select and compute the rows there, while each partition keeps filtering on the host when its
//! measured filter makes that cheaper than the upload (see [`crate::exec::fuse::HostPrefilter`]).
//! A build side's `CoalescePartitionsExec` stays above the chain: the join reads every partition
//! of the GPU exec below it on the device.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan};

use crate::config::GpuConfig;
use crate::cost::Profile;
use crate::device::Gpu;
use crate::exec::join::gathered_input;
use crate::exec::{GpuFilterProjectExec, GpuHashJoinExec};

/// `plan` with the inputs of every GPU join filtered and projected on the device where they
/// compile (`gpu.fuse.expressions`; filters with `gpu.fuse.filters`).
pub fn fuse_join_inputs(
    plan: Arc<dyn ExecutionPlan>,
    cfg: &GpuConfig,
    pricing: Option<(&Gpu, &Profile)>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if !cfg.fuse_expressions {
        return Ok(plan);
    }
    plan.transform_up(|node| {
        if node.downcast_ref::<GpuHashJoinExec>().is_none() {
            return Ok(Transformed::no(node));
        }
        let mut changed = false;
        let children: Vec<Arc<dyn ExecutionPlan>> = node
            .children()
            .into_iter()
            .enumerate()
            .map(|(i, side)| match fused_side(side, i == 0, cfg, pricing) {
                Some(new) => {
                    changed = true;
                    new
                }
                None => Arc::clone(side),
            })
            .collect();
        match changed {
            true => {
                let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                Ok(Transformed::yes(node.replace_children(children, recompute)?))
            }
            false => Ok(Transformed::no(node)),
        }
    })
    .map(|t| t.data)
}

/// `side` with its filters and projections on the device, looking below the
/// `CoalescePartitionsExec` of a build side; `None` when there is nothing to take or it does
/// not compile (logged).
pub fn fused_side(
    side: &Arc<dyn ExecutionPlan>,
    build: bool,
    cfg: &GpuConfig,
    pricing: Option<(&Gpu, &Profile)>,
) -> Option<Arc<dyn ExecutionPlan>> {
    if build && let Some(input) = gathered_input(side) {
        let inner = fused(input, cfg, pricing)?;
        return Some(Arc::new(CoalescePartitionsExec::new(inner)));
    }
    if let Some(input) = super::one_partition::round_robin_dropped(side, cfg) {
        let inner = fused(input, cfg, pricing)?;
        let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        return Arc::clone(side).replace_children(vec![inner], recompute).ok();
    }
    fused(side, cfg, pricing)
}

/// `top`'s filters and projections on the GPU, their upload priced under `pricing`.
fn fused(
    top: &Arc<dyn ExecutionPlan>,
    cfg: &GpuConfig,
    pricing: Option<(&Gpu, &Profile)>,
) -> Option<Arc<dyn ExecutionPlan>> {
    match GpuFilterProjectExec::try_new(top, cfg.fuse_filters) {
        Ok(exec) => exec.map(|e| {
            let e = match pricing {
                Some((gpu, p)) => e.with_priced_upload(cfg, gpu, p),
                None => e,
            };
            Arc::new(e) as Arc<dyn ExecutionPlan>
        }),
        Err(why) => {
            log::debug!("a GPU join's input stays on the CPU: {}", crate::error::reason(&why));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::common::JoinType;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{Column, binary, lit};
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::joins::PartitionMode;
    use datafusion::physical_plan::{ExecutionPlanProperties, displayable};

    use super::*;
    use crate::exec::as_gpu_exec;
    use crate::testing::{hash_join_on_first, memory_kv};

    /// A GPU join over filtered inputs reads them from the device: the probe's filter directly,
    /// the build's below its CoalescePartitionsExec; a CPU join's inputs and a join with
    /// `gpu.fuse.expressions` off are left alone. Running the pass again changes nothing.
    #[test]
    fn filters_below_gpu_joins_move_to_the_device() {
        let filtered = |rows: i64| -> Arc<dyn ExecutionPlan> {
            let src = memory_kv(rows, 2);
            let pred = binary(Arc::new(Column::new("k", 0)), Operator::Gt, lit(10i64), &src.schema()).unwrap();
            Arc::new(FilterExec::try_new(pred, src).unwrap())
        };
        let build = Arc::new(CoalescePartitionsExec::new(filtered(1000))) as Arc<dyn ExecutionPlan>;
        let cpu_join = hash_join_on_first(build, filtered(5000), JoinType::Inner, None, PartitionMode::CollectLeft);
        let cfg = GpuConfig::default();
        let gpu_join: Arc<dyn ExecutionPlan> = Arc::new(GpuHashJoinExec::try_new(Arc::clone(&cpu_join), &cfg).unwrap());

        let plan = fuse_join_inputs(Arc::clone(&gpu_join), &cfg, None).unwrap();
        let text = displayable(plan.as_ref()).indent(true).to_string();
        assert_eq!(text.matches("GpuFilterProjectExec: on the GPU=[FilterExec: k@0 > 10]").count(), 2, "{text}");
        let (build, probe) = (plan.children()[0], plan.children()[1]);
        assert!(as_gpu_exec(probe).is_some(), "{text}");
        let coalesce = build.downcast_ref::<CoalescePartitionsExec>().expect("the build side still coalesces");
        assert!(as_gpu_exec(coalesce.input()).is_some(), "{text}");
        assert_eq!(plan.schema(), gpu_join.schema());
        let count = |p: &Arc<dyn ExecutionPlan>| p.output_partitioning().partition_count();
        assert_eq!(count(probe), count(cpu_join.children()[1]));

        // Benchmark records say so next to the join's algorithm.
        let placed = crate::exec::placements(&plan);
        assert!(placed[0].detail.ends_with(" (build and probe input filtered and projected on the GPU)"), "{placed:?}");
        assert_eq!(
            crate::exec::placement::summary(&placed),
            format!("joins 1/1 GPU ({}×1)", placed[0].detail.split_whitespace().next().unwrap())
        );

        let again = fuse_join_inputs(Arc::clone(&plan), &cfg, None).unwrap();
        assert_eq!(text, displayable(again.as_ref()).indent(true).to_string());

        let untouched = fuse_join_inputs(Arc::clone(&cpu_join), &cfg, None).unwrap();
        assert!(!displayable(untouched.as_ref()).indent(true).to_string().contains("GpuFilterProjectExec"));
        let off = GpuConfig { fuse_expressions: false, ..GpuConfig::default() };
        let plan = fuse_join_inputs(Arc::clone(&gpu_join), &off, None).unwrap();
        assert!(!displayable(plan.as_ref()).indent(true).to_string().contains("GpuFilterProjectExec"));
    }
}
