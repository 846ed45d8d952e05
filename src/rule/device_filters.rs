//! Filters over GPU operators' output taken onto the device.
//!
//! A `FilterExec` (with the projections around it) that reads a GPU join or aggregate, and does
//! not feed a GPU join (whose inputs [`super::join_inputs`] takes), runs on the host: the GPU
//! operator downloads every row it makes and DataFusion drops most of them there (a `HAVING`
//! over a GPU aggregate keeps a few groups of many). Where every expression of the chain
//! compiles for the device, [`GpuFilterProjectExec`] takes its place: it reads the GPU
//! operator's batches on the device and only the rows the filter keeps cross to the host, or
//! stay on the device for a GPU parent.
//!
//! Filters over a cached scan are left as they are (a CPU parent reads the scan's host
//! batches), as are those over a CPU operator.
//!
//! With `gpu.cost.resident_inputs` off, a chain over fewer likely rows than `gpu.cost.min_rows`
//! stays on the CPU: there the host filters a few rows in less time than the device's launches
//! take, but the GPU operator below then downloads them all.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;

use super::eligibility::likely_rows;
use crate::config::GpuConfig;
use crate::exec::cached_scan::CACHED_SCAN_NAME;
use crate::exec::{GpuFilterProjectExec, as_gpu_exec};

/// `plan` with each filter chain over a GPU operator's output evaluated on the device
/// (`gpu.fuse.expressions` and `gpu.fuse.filters`).
pub fn fuse_filters_over_gpu_output(plan: Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> Result<Arc<dyn ExecutionPlan>> {
    if !cfg.fuse_expressions || !cfg.fuse_filters {
        return Ok(plan);
    }
    plan.transform_down(|node| match over_gpu_output(&node, cfg) {
        Some(exec) => Ok(Transformed::yes(exec)),
        None => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// `top`'s filters and projections on the device, when they include a filter, read a GPU exec's
/// output and compile; `None` otherwise.
fn over_gpu_output(top: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> Option<Arc<dyn ExecutionPlan>> {
    // Only a chain of filters and projections with a filter in it is compiled below.
    let mut node = top;
    let mut filters = false;
    loop {
        if let Some(f) = node.downcast_ref::<FilterExec>() {
            filters = true;
            node = f.input();
        } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            node = p.input();
        } else {
            break;
        }
    }
    // A cached scan's CPU parent reads its host batches: there the host filters them as before.
    if !filters || as_gpu_exec(node).is_none() || node.name() == CACHED_SCAN_NAME {
        return None;
    }
    let exec = match GpuFilterProjectExec::try_new(top, true) {
        Ok(Some(exec)) => exec,
        Ok(None) => return None,
        Err(why) => {
            log::debug!("a filter over a GPU operator stays on the CPU: {}", crate::error::reason(&why));
            return None;
        }
    };
    let fused = exec.fused();
    // The chain the exec took can stop above a projection under a filter: the GPU exec must
    // still be its input, and a filter in it.
    if !Arc::ptr_eq(&fused.input, node) || !fused.chain.iter().any(|n| n.downcast_ref::<FilterExec>().is_some()) {
        return None;
    }
    // (With gpu.cost.resident_inputs its input, a GPU operator's output, is on the device
    // already: the chain goes there whatever its size.)
    if !cfg.resident_inputs
        && let Some(rows) = likely_rows(&fused.input)
        && rows < cfg.min_rows as f64
    {
        log::debug!(
            "a filter over {} stays on the CPU: about {rows:.0} rows, below gpu.cost.min_rows = {}",
            fused.input.name(),
            cfg.min_rows
        );
        return None;
    }
    Some(Arc::new(exec))
}

#[cfg(test)]
mod tests {
    use datafusion::common::JoinType;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{Column, binary, lit};
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::joins::PartitionMode;

    use super::*;
    use crate::exec::GpuHashJoinExec;
    use crate::testing::{hash_join_on_first, memory_kv};

    fn text(plan: &Arc<dyn ExecutionPlan>) -> String {
        displayable(plan.as_ref()).indent(true).to_string()
    }

    fn filter_over(input: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        let pred = binary(Arc::new(Column::new("k", 0)), Operator::Gt, lit(10i64), &input.schema()).unwrap();
        Arc::new(FilterExec::try_new(pred, input).unwrap())
    }

    /// A filter (with a projection above it) over a GPU join's output runs on the device and
    /// reads the join there; one over a CPU operator, a projection alone, a filter over a
    /// projection of the join, a filter over fewer likely rows than gpu.cost.min_rows and one
    /// with gpu.fuse.filters off stay as they are.
    #[test]
    fn filters_over_gpu_operators_move_to_the_device() {
        let cfg = GpuConfig { min_rows: 0, ..GpuConfig::default() };
        let build = Arc::new(CoalescePartitionsExec::new(memory_kv(1000, 2))) as Arc<dyn ExecutionPlan>;
        let cpu_join = hash_join_on_first(build, memory_kv(5000, 2), JoinType::Inner, None, PartitionMode::CollectLeft);
        let gpu_join: Arc<dyn ExecutionPlan> = Arc::new(GpuHashJoinExec::try_new(Arc::clone(&cpu_join), &cfg).unwrap());
        let filtered = filter_over(Arc::clone(&gpu_join));
        let schema = filtered.schema();
        let projected: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(
                vec![(Arc::new(Column::new(schema.field(1).name(), 1)) as _, "v".to_string())],
                Arc::clone(&filtered),
            )
            .unwrap(),
        );

        let plan = fuse_filters_over_gpu_output(Arc::clone(&projected), &cfg).unwrap();
        let shown = text(&plan);
        assert!(shown.starts_with("GpuFilterProjectExec: on the GPU=[ProjectionExec"), "{shown}");
        assert!(shown.contains("FilterExec: k@0 > 10"), "{shown}");
        assert_eq!(plan.schema(), projected.schema());
        let child = plan.children()[0];
        assert!(child.downcast_ref::<GpuHashJoinExec>().is_some(), "{shown}");
        assert_eq!(shown, text(&fuse_filters_over_gpu_output(Arc::clone(&plan), &cfg).unwrap()), "run twice");

        let unchanged = |p: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig| {
            let after = fuse_filters_over_gpu_output(Arc::clone(p), cfg).unwrap();
            assert_eq!(text(p), text(&after));
        };
        unchanged(&filter_over(memory_kv(5000, 2)), &cfg);
        let projection_alone: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(vec![(Arc::new(Column::new("k", 0)) as _, "k".to_string())], Arc::clone(&gpu_join))
                .unwrap(),
        );
        unchanged(&projection_alone, &cfg);
        // A projection under the filter computes for rows the filter drops: the chain stays.
        unchanged(&filter_over(Arc::clone(&projection_alone)), &cfg);
        unchanged(&filtered, &GpuConfig { min_rows: 1_000_000, resident_inputs: false, ..cfg.clone() });
        let big = GpuConfig { min_rows: 1_000_000, ..cfg.clone() };
        assert_ne!(text(&filtered), text(&fuse_filters_over_gpu_output(Arc::clone(&filtered), &big).unwrap()));
        unchanged(&filtered, &GpuConfig { fuse_filters: false, ..cfg.clone() });
        unchanged(&filtered, &GpuConfig { fuse_expressions: false, ..cfg });
    }
}
