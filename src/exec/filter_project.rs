//! `GpuFilterProjectExec`: the `FilterExec`s and `ProjectionExec`s below a GPU join, evaluated on
//! the device ([`FusedInput`], as a GPU aggregate evaluates those below it).
//!
//! Without it, DataFusion filters and projects a join's input on the host and the join uploads
//! what is left. With it, the raw columns the filter and projection read go up, and the
//! generated kernels select and compute the rows on the device. Each partition still measures its
//! bottom filter on its first rows ([`fuse::HostPrefilter`]) and keeps filtering on the host where that
//! is cheaper than uploading the rows the filter drops (a selective filter over pageable memory);
//! the device applies the filter again either way. A scan of pinned tables uploads without a host
//! copy, so there the device filters what the host would have.

use datafusion::common::not_impl_err;
use std::fmt;
use std::sync::{Arc, OnceLock};

use datafusion::common::Statistics;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties};
use futures::StreamExt;

use super::fuse::{self, FusedInput, PrefilterCounters};
use super::join::gathered_input;
use super::upload::ChunkUploader;
use super::{
    DeviceBatchStream, GpuExec, as_gpu_exec, blocking, download_stream, onto, partition_gpu, single_child, timeline,
};
use crate::columns::DeviceBatch;
use crate::config::GpuConfig;
use crate::device::Gpu;

#[derive(Debug)]
pub struct GpuFilterProjectExec {
    /// The top node of the chain taken in: this exec has its properties (schema, partitioning,
    /// ordering) and shows it in EXPLAIN.
    top: Arc<dyn ExecutionPlan>,
    fused: Arc<FusedInput>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuFilterProjectExec {
    /// The filters and projections from `top` down taken into one exec, when every expression
    /// compiles for the device (`filters`: FilterExecs too, `gpu.fuse.filters`). `Ok(None)` when
    /// `top` is neither; `Err` says why the chain stays on the CPU.
    pub fn try_new(top: &Arc<dyn ExecutionPlan>, filters: bool) -> crate::error::Result<Option<Self>> {
        let schema = top.schema();
        let outputs: Vec<(Arc<dyn PhysicalExpr>, _)> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| (Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>, f.as_ref().clone()))
            .collect();
        let Some(fused) = FusedInput::try_new(top, &outputs, filters)? else { return Ok(None) };
        if fused.chain.is_empty() {
            return Ok(None);
        }
        if fused.projection.output_schema.fields() != schema.fields() {
            return not_impl_err!(
                "the device projection gives {:?}, not {:?}",
                fused.projection.output_schema.fields(),
                schema.fields()
            );
        }
        Ok(Some(GpuFilterProjectExec {
            top: Arc::clone(top),
            fused: Arc::new(fused),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    /// The filters and projections taken in, compiled for the device, and the node below them.
    /// This exec with its upload priced (see [`FusedInput::priced`]).
    pub fn with_priced_upload(self, cfg: &GpuConfig, gpu: &Gpu, profile: &crate::cost::Profile) -> Self {
        GpuFilterProjectExec { fused: Arc::new(self.fused.priced(cfg, gpu, profile)), ..self }
    }

    /// This exec over `input`, its properties (partitioning, equivalences) recomputed from it:
    /// the chain it fused is rebuilt over the new input. (`with_new_children` keeps the chain as
    /// it was, for display and statistics.)
    pub fn over_input(&self, input: Arc<dyn ExecutionPlan>) -> crate::error::Result<Self> {
        let fused = self.fused.over(input)?;
        let top = fused.chain.first().cloned().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("a GPU filter-project has no fused nodes".into())
        })?;
        Ok(GpuFilterProjectExec { top, fused: Arc::new(fused), metrics: ExecutionPlanMetricsSet::new() })
    }

    pub fn fused(&self) -> &FusedInput {
        &self.fused
    }
}

/// The input sides of a GPU join (`build`, `probe`) whose filters and projections run on the
/// device, as the rule's `join_inputs` placed them (a build side's below its coalesce).
pub fn device_computed_sides(join: &Arc<dyn ExecutionPlan>) -> Vec<&'static str> {
    let is_fused = |p: &Arc<dyn ExecutionPlan>| p.downcast_ref::<GpuFilterProjectExec>().is_some();
    let mut sides = Vec::new();
    let children = join.children();
    if children.first().is_some_and(|build| is_fused(build) || gathered_input(build).is_some_and(is_fused)) {
        sides.push("build");
    }
    if children.get(1).is_some_and(|p| is_fused(p)) {
        sides.push("probe");
    }
    sides
}

impl DisplayAs for GpuFilterProjectExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "{}", self.fused.describe()),
            _ => write!(f, "GpuFilterProjectExec: on the GPU=[{}]", self.fused.describe()),
        }
    }
}

impl ExecutionPlan for GpuFilterProjectExec {
    fn name(&self) -> &str {
        "GpuFilterProjectExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.top.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.fused.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let mut recursion = TreeNodeRecursion::Continue;
        for node in &self.fused.chain {
            recursion = node.apply_expressions(f)?;
            if recursion == TreeNodeRecursion::Stop {
                break;
            }
        }
        Ok(recursion)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        // The chain's nodes keep their display and statistics; the fusion reads the new input.
        let input = single_child(children, self.name())?;
        Ok(Arc::new(GpuFilterProjectExec {
            top: Arc::clone(&self.top),
            fused: Arc::new(self.fused.with_input(input)),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuFilterProjectExec {
            top: Arc::clone(&self.top),
            fused: Arc::clone(&self.fused),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        Ok(download_stream(self.schema(), self.execute_device(partition, context)?))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats {
            [input] => self.fused.statistics(input, args),
            _ => Err(DataFusionError::Internal(format!(
                "GpuFilterProjectExec takes the statistics of one input, not {}",
                input_stats.len()
            ))),
        }
    }
}

impl GpuExec for GpuFilterProjectExec {
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = partition_gpu(&cfg, &context, partition)?;
        let b = || MetricBuilder::new(&self.metrics);
        let (upload_time, pack_time, project_time) = (
            b().subset_time("upload_time", partition),
            b().subset_time("pack_time", partition),
            b().subset_time("project_time", partition),
        );
        let output_rows = b().output_rows(partition);
        let fused = Arc::clone(&self.fused);
        let output_schema = self.schema();
        let who = match timeline::enabled() {
            true => {
                let names: Vec<&str> = output_schema.fields().iter().map(|f| f.name().as_str()).collect();
                format!("filter-project [{}] p{partition}", names.join(", "))
            }
            false => String::new(),
        };
        // The kernels the rows run through: without the host's filter once it filters them all.
        let chosen: Arc<OnceLock<Arc<FusedInput>>> = Arc::new(OnceLock::new());
        let evaluate = {
            let (gpu, fused, chosen, output_schema, who) =
                (Arc::clone(&gpu), Arc::clone(&fused), Arc::clone(&chosen), Arc::clone(&output_schema), who.clone());
            move |chunk: DeviceBatch| {
                let (gpu, fused, chosen, schema, time, rows, who) = (
                    Arc::clone(&gpu),
                    Arc::clone(&fused),
                    Arc::clone(&chosen),
                    Arc::clone(&output_schema),
                    project_time.clone(),
                    output_rows.clone(),
                    who.clone(),
                );
                blocking(move || {
                    let _t = time.timer();
                    let f = chosen.get().unwrap_or(&fused);
                    let stream = Arc::clone(chunk.stream());
                    let n = chunk.num_rows() as u64;
                    timeline::mark(&who, || format!("evaluating a device chunk of {n} rows"));
                    let (cols, m) = f.projection.evaluate(&gpu, &stream, chunk.columns(), n)?;
                    timeline::mark(&who, || format!("chunk of {n} rows evaluated: {m} rows"));
                    rows.add(m as usize);
                    DeviceBatch::try_new(schema, cols, m as usize, gpu, stream)
                })
            }
        };
        // A GPU exec below hands over its batches on the device: only the kernels run.
        if let Some(child) = as_gpu_exec(&fused.input) {
            timeline::mark(&who, || "start (device input)".into());
            let input = onto(child.execute_device(partition, Arc::clone(&context))?, &gpu);
            let columns = fused.projection.inputs.clone();
            let upload_schema = Arc::clone(&fused.projection.upload_schema);
            let out = input.then(move |b| {
                let evaluate = evaluate.clone();
                let (columns, upload_schema) = (columns.clone(), Arc::clone(&upload_schema));
                async move { evaluate(b?.select(&columns, &upload_schema)?).await }
            });
            return Ok(without_empty_batches(out));
        }
        let input = fused.input.execute(partition, Arc::clone(&context))?;
        let pre = fuse::host_prefilter(&fused, cfg.host_filter_below, fused.upload_ns_per_row);
        let counters = PrefilterCounters {
            rows: b().counter("input_rows", partition),
            dropped: b().counter("host_filtered_rows", partition),
            filtering: b().counter("host_filter_partitions", partition),
        };
        let projected = Box::pin(fuse::prefiltered(input, Arc::clone(&fused), chosen, pre, counters, who));
        let uploader = ChunkUploader::new(Arc::clone(&gpu), cfg.batch_rows, upload_time, pack_time);
        // Chunks of about gpu.batch_rows input rows, uploaded as their batches arrive; each is
        // filtered and projected on the device as soon as it is complete.
        let chunks = uploader.chunks(projected);
        let out = chunks.then(move |chunk| {
            let evaluate = evaluate.clone();
            async move { evaluate(chunk?).await }
        });
        Ok(without_empty_batches(out))
    }
}

/// `batches` without those the filter left empty (errors pass).
fn without_empty_batches(
    batches: impl futures::Stream<Item = Result<DeviceBatch>> + Send + 'static,
) -> DeviceBatchStream {
    Box::pin(batches.filter(|b| std::future::ready(!matches!(b, Ok(b) if b.num_rows() == 0))))
}
