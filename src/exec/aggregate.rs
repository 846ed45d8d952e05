//! `GpuAggregateExec`: DataFusion's `AggregateExec` run by the GPU group-by of
//! [`crate::aggregate`], in every mode.
//!
//! It keeps the original aggregate for its children, properties, statistics and display. Each
//! partition's input is coalesced on the host into chunks of about `gpu.batch_rows` rows; a
//! chunk is uploaded and reduced to DataFusion's intermediate state (group keys and state
//! columns), which comes back to the host. Chunk states are merged on the GPU by the same
//! group-by over the state columns whenever they add up to a chunk, and once more at the end;
//! the final values are the merged states (AVG's evaluated by DataFusion's own accumulator, one
//! row per group).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Statistics;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::distribution_requirements::InputDistributionRequirements;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties,
};
use futures::StreamExt;

use super::blocking;
use super::fuse::FusedInput;
use crate::aggregate::layout::{AggregateLayout, Finalize};
use crate::aggregate::{AggregateAlgorithmSetting, GroupByOptions, GroupByTimes, GroupIdMethod, group_by};
use crate::columns::{DeviceBatch, DeviceColumn};
use crate::config::GpuConfig;
use crate::cost::Profile;
use crate::cost::aggregate::{self as agg_cost, AggregateEstimate, AggregateShape};
use crate::device::Gpu;

#[derive(Debug)]
pub struct GpuAggregateExec {
    /// The `AggregateExec` this replaces.
    agg: Arc<dyn ExecutionPlan>,
    layout: Arc<AggregateLayout>,
    setting: AggregateAlgorithmSetting,
    /// The group-by method it runs, and the cost model's estimates when it chose.
    method: GroupIdMethod,
    estimate: Option<Arc<AggregateEstimate>>,
    /// The filters and projections below it that run on the GPU, when they can; else why not.
    fused: Option<Arc<FusedInput>>,
    fuse_note: Option<String>,
    metrics: ExecutionPlanMetricsSet,
}

fn aggregate(plan: &Arc<dyn ExecutionPlan>) -> Result<&AggregateExec> {
    plan.downcast_ref::<AggregateExec>()
        .ok_or_else(|| DataFusionError::Internal("GpuAggregateExec wraps a plan that is not an AggregateExec".into()))
}

impl GpuAggregateExec {
    /// The GPU form of `agg` (an `AggregateExec`), or why it cannot have one.
    pub fn try_new(agg: Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> std::result::Result<Self, String> {
        let layout = {
            let a = aggregate(&agg).map_err(|e| e.to_string())?;
            let layout = AggregateLayout::new(a)?;
            for f in &layout.finalize {
                if let Finalize::Evaluate { agg: i, .. } = f {
                    if !a.aggr_expr()[*i].groups_accumulator_supported() {
                        return Err(format!(
                            "`{}` has no groups accumulator to evaluate its state",
                            a.aggr_expr()[*i].name()
                        ));
                    }
                }
            }
            Arc::new(layout)
        };
        Ok(GpuAggregateExec {
            agg,
            layout,
            setting: cfg.aggregate_algorithm,
            method: cfg.aggregate_algorithm.method(),
            estimate: None,
            fused: None,
            fuse_note: None,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// This exec with the `FilterExec`s and `ProjectionExec`s directly below it evaluated on the
    /// GPU, when every expression can be (`gpu.fuse_expressions`); EXPLAIN says why not otherwise.
    /// Filters are taken in only with `filters` (`gpu.fuse_filters`).
    pub fn with_fused_input(mut self, filters: bool) -> Self {
        let Ok(a) = aggregate(&self.agg) else { return self };
        let outputs: Vec<_> = self
            .layout
            .upload
            .iter()
            .zip(self.layout.upload_schema.fields())
            .map(|(e, f)| (Arc::clone(e), f.as_ref().clone()))
            .collect();
        match FusedInput::try_new(a.input(), &outputs, filters) {
            Ok(Some(f)) if f.projection.inputs.is_empty() => {
                self.fuse_note = Some("the filter below reads no columns".into());
            }
            Ok(Some(f)) => self.fused = Some(Arc::new(f)),
            Ok(None) => {}
            Err(why) => self.fuse_note = Some(why),
        }
        self
    }

    /// The filters and projections this aggregate evaluates on the GPU, if any.
    pub fn fused_input(&self) -> Option<&FusedInput> {
        self.fused.as_deref()
    }

    /// This exec with the cost model's estimate; under `gpu.aggregate_algorithm = auto` it runs
    /// the method the model chose.
    pub fn with_estimate(mut self, estimate: AggregateEstimate) -> Self {
        if self.setting == AggregateAlgorithmSetting::Auto {
            self.method = estimate.choice.best;
        }
        self.estimate = Some(Arc::new(estimate));
        self
    }

    /// The cost model's estimate, when it was consulted.
    pub fn estimate(&self) -> Option<&AggregateEstimate> {
        self.estimate.as_deref()
    }

    /// The `AggregateExec` this replaces.
    pub fn original(&self) -> &Arc<dyn ExecutionPlan> {
        &self.agg
    }

    /// The group-by method this aggregate starts with (its `gpu.aggregate_algorithm` setting
    /// resolved; under `auto` with an estimate, hash, then the model's choice on the groups found).
    pub fn method_name(&self) -> &'static str {
        self.first_method().name()
    }

    fn first_method(&self) -> GroupIdMethod {
        if self.setting == AggregateAlgorithmSetting::Auto && self.estimate.is_some() {
            GroupIdMethod::Hash
        } else {
            self.method
        }
    }

    pub fn layout(&self) -> &AggregateLayout {
        &self.layout
    }
}

impl DisplayAs for GpuAggregateExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let Ok(a) = aggregate(&self.agg) else { return write!(f, "GpuAggregateExec") };
        match t {
            DisplayFormatType::TreeRender => {
                a.fmt_as(t, f)?;
                write!(f, "\nalgorithm={}", self.method_name())
            }
            _ => {
                write!(f, "Gpu")?;
                a.fmt_as(t, f)?;
                match &self.estimate {
                    Some(e) if self.setting == AggregateAlgorithmSetting::Auto => write!(
                        f,
                        ", algorithm=hash, then chosen on the groups found (cost model at plan time: {} for {}; {})",
                        e.choice.describe(),
                        fmt_count(e.shape.groups),
                        e.verdict.describe()
                    )?,
                    Some(e) => write!(
                        f,
                        ", algorithm={} (gpu.aggregate_algorithm={}; {})",
                        self.method.name(),
                        self.setting,
                        e.verdict.describe()
                    )?,
                    None => write!(f, ", algorithm={} (gpu.aggregate_algorithm={})", self.method.name(), self.setting)?,
                }
                match (&self.fused, &self.fuse_note) {
                    (Some(fused), _) => write!(f, ", fused on the GPU=[{}]", fused.describe())?,
                    (None, note) => {
                        if !self.layout.host_evaluated.is_empty() {
                            write!(
                                f,
                                ", evaluated on the host before upload=[{}]",
                                self.layout.host_evaluated.join(", ")
                            )?;
                        }
                        if let Some(why) = note {
                            write!(f, ", input filter/projection on the CPU ({why})")?;
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

impl ExecutionPlan for GpuAggregateExec {
    fn name(&self) -> &str {
        "GpuAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.agg.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        match &self.fused {
            Some(f) => vec![&f.input],
            None => self.agg.children(),
        }
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.agg.apply_expressions(f)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        self.agg.input_distribution_requirements()
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let (agg, fused) = match &self.fused {
            // The aggregate keeps its original chain (display, statistics); the fusion reads the
            // new input.
            Some(f) => {
                let [input] = <[_; 1]>::try_from(children).map_err(|c: Vec<_>| {
                    DataFusionError::Internal(format!("GpuAggregateExec takes one child, not {}", c.len()))
                })?;
                (Arc::clone(&self.agg), Some(Arc::new(f.with_input(input))))
            }
            None => {
                let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                (Arc::clone(&self.agg).replace_children(children, recompute)?, None)
            }
        };
        Ok(Arc::new(GpuAggregateExec {
            agg,
            layout: Arc::clone(&self.layout),
            setting: self.setting,
            method: self.method,
            estimate: self.estimate.clone(),
            fused,
            fuse_note: self.fuse_note.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuAggregateExec {
            agg: Arc::clone(&self.agg),
            layout: Arc::clone(&self.layout),
            setting: self.setting,
            method: self.method,
            estimate: self.estimate.clone(),
            fused: self.fused.clone(),
            fuse_note: self.fuse_note.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = Gpu::for_config(&cfg)?;
        let a = aggregate(&self.agg)?;
        let input = match &self.fused {
            Some(f) => f.input.execute(partition, Arc::clone(&context))?,
            None => a.input().execute(partition, Arc::clone(&context))?,
        };
        // Under `auto` the plan's group count is often DataFusion's fallback (the input's rows,
        // without distinct counts): the first chunk runs the hash group-by, and the cost model
        // chooses again for the next chunks and merges from the group count it found.
        let adaptive = match (&self.estimate, self.setting) {
            (Some(e), AggregateAlgorithmSetting::Auto) => {
                Some((e.shape, Arc::new(crate::cost::profile::load(gpu.info(), &cfg.profile_dir))))
            }
            _ => None,
        };
        let first = self.first_method();
        let run = Run {
            gpu,
            fused: self.fused.clone(),
            layout: Arc::clone(&self.layout),
            agg: Arc::clone(&self.agg),
            opts: std::sync::Mutex::new(GroupByOptions { method: first, ..GroupByOptions::default() }),
            adaptive,
            chunk_rows: cfg.batch_rows.max(1),
            batch_size: context.session_config().batch_size().max(1),
            metrics: Metrics::new(&self.metrics, partition),
        };
        let schema = self.schema();
        let batches = futures::stream::once(run.run(input))
            .map(|r| {
                futures::stream::iter(match r {
                    Ok(v) => v.into_iter().map(Ok).collect::<Vec<_>>(),
                    Err(e) => vec![Err(e)],
                })
            })
            .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        match &self.fused {
            Some(_) => vec![ChildStats::At(partition)],
            None => self.agg.child_stats_requests(partition),
        }
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match (&self.fused, input_stats) {
            (Some(f), [input]) => self.agg.statistics_from_inputs(&[f.statistics(input, args)?], args),
            _ => self.agg.statistics_from_inputs(input_stats, args),
        }
    }
}

/// Per-partition metrics.
#[derive(Clone)]
struct Metrics {
    upload_time: Time,
    project_time: Time,
    group_ids_time: Time,
    aggregate_time: Time,
    materialize_time: Time,
    download_time: Time,
    input_rows: Count,
    chunks: Count,
    merges: Count,
    /// Batches the partition group-by handed to the hash path (see aggregate::partition).
    hash_fallbacks: Count,
    /// Times the run-time choice changed the group-by method (under `auto`).
    method_changes: Count,
    output_rows: Count,
}

impl Metrics {
    fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let b = || MetricBuilder::new(set);
        Metrics {
            upload_time: b().subset_time("upload_time", partition),
            project_time: b().subset_time("project_time", partition),
            group_ids_time: b().subset_time("group_ids_time", partition),
            aggregate_time: b().subset_time("aggregate_time", partition),
            materialize_time: b().subset_time("materialize_time", partition),
            download_time: b().subset_time("download_time", partition),
            input_rows: b().counter("input_rows", partition),
            chunks: b().counter("chunks", partition),
            merges: b().counter("merges", partition),
            hash_fallbacks: b().counter("hash_fallbacks", partition),
            method_changes: b().counter("method_changes", partition),
            output_rows: b().output_rows(partition),
        }
    }
}

/// One partition's execution.
struct Run {
    gpu: Arc<Gpu>,
    fused: Option<Arc<FusedInput>>,
    layout: Arc<AggregateLayout>,
    agg: Arc<dyn ExecutionPlan>,
    /// How the next group-by runs (changed by the run-time choice).
    opts: std::sync::Mutex<GroupByOptions>,
    /// Under `auto`: the plan's shape and the profile, to choose again on observed groups.
    adaptive: Option<(AggregateShape, Arc<Profile>)>,
    chunk_rows: usize,
    batch_size: usize,
    metrics: Metrics,
}

impl Run {
    async fn run(self, mut input: SendableRecordBatchStream) -> Result<Vec<RecordBatch>> {
        let layout = Arc::clone(&self.layout);
        let chunk_schema = match &self.fused {
            Some(f) => Arc::clone(&f.projection.upload_schema),
            None => Arc::clone(&layout.upload_schema),
        };
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0usize;
        let mut parts: Vec<RecordBatch> = Vec::new();
        let mut parts_rows = 0usize;
        loop {
            let next = input.next().await.transpose()?;
            let done = next.is_none();
            if let Some(b) = next {
                let b = match &self.fused {
                    Some(f) => b.project(&f.projection.inputs)?,
                    None => layout.project(&b)?,
                };
                pending_rows += b.num_rows();
                self.metrics.input_rows.add(b.num_rows());
                pending.push(b);
            }
            if pending_rows > 0 && (pending_rows >= self.chunk_rows || done) {
                let host = concat_batches(&chunk_schema, &pending)?;
                pending.clear();
                pending_rows = 0;
                self.metrics.chunks.add(1);
                let state = self.group_by(host, true).await?;
                parts_rows += state.num_rows();
                parts.push(state);
                if parts.len() > 1 && parts_rows >= self.chunk_rows {
                    let merged = self.merge(std::mem::take(&mut parts)).await?;
                    parts_rows = merged.num_rows();
                    parts.push(merged);
                }
            }
            if done {
                break;
            }
        }
        // No input at all still makes a state (one row without group keys), and several parts merge.
        let state = if parts.len() == 1 {
            parts.pop().ok_or_else(|| DataFusionError::Internal("a GPU aggregate lost its state".into()))?
        } else if parts.is_empty() {
            let empty = RecordBatch::new_empty(chunk_schema);
            self.group_by(empty, true).await?
        } else {
            self.merge(parts).await?
        };
        let out = self.output(state)?;
        self.metrics.output_rows.add(out.num_rows());
        let mut batches = Vec::new();
        let mut offset = 0;
        while offset < out.num_rows() {
            let len = self.batch_size.min(out.num_rows() - offset);
            batches.push(out.slice(offset, len));
            offset += len;
        }
        if batches.is_empty() {
            batches.push(out);
        }
        Ok(batches)
    }

    /// Merges state batches into one.
    async fn merge(&self, parts: Vec<RecordBatch>) -> Result<RecordBatch> {
        self.metrics.merges.add(1);
        let host = concat_batches(&self.layout.state_schema, &parts)?;
        self.group_by(host, false).await
    }

    /// Uploads `host` (group columns first), groups it and downloads the state batch: a chunk of
    /// input rows (`input`, through the fused filters and projections first) or of states.
    async fn group_by(&self, host: RecordBatch, input: bool) -> Result<RecordBatch> {
        let opts = *self.opts.lock().map_err(|_| DataFusionError::Internal("a GPU aggregate's options lock".into()))?;
        let (gpu, layout, m) = (Arc::clone(&self.gpu), Arc::clone(&self.layout), self.metrics.clone());
        let in_rows = host.num_rows() as u64;
        let fused = if input { self.fused.clone() } else { None };
        let out = blocking(move || {
            let stream = gpu.stream();
            let dev = {
                let _t = m.upload_time.timer();
                DeviceBatch::upload(&gpu, &stream, &host)?
            };
            let (cols, rows) = match &fused {
                Some(f) => {
                    let _t = m.project_time.timer();
                    f.projection.evaluate(&gpu, &stream, dev.columns(), dev.num_rows() as u64)?
                }
                None => (dev.columns().to_vec(), dev.num_rows() as u64),
            };
            let mut times = GroupByTimes::default();
            let (reductions, distinct) =
                if input { (&layout.first, &layout.first_distinct) } else { (&layout.merge, &layout.merge_distinct) };
            let out =
                group_by(&gpu, &stream, &cols[..layout.groups], &cols, reductions, distinct, rows, &opts, &mut times)?;
            m.group_ids_time.add_duration(times.group_ids);
            m.aggregate_time.add_duration(times.aggregate);
            m.materialize_time.add_duration(times.materialize);
            if out.method != opts.method {
                m.hash_fallbacks.add(1);
            }
            // State columns in the state schema's order: keys, then each state from the
            // reductions (in order) or from COUNT(DISTINCT)'s lists.
            let mut columns: Vec<Arc<DeviceColumn>> = out.keys.into_iter().map(Arc::new).collect();
            let (mut values, mut lists) = (out.values.into_iter(), out.distinct.into_iter());
            for p in layout.groups..layout.state_schema.fields().len() {
                let next = if layout.distinct_states.contains(&p) { lists.next() } else { values.next() };
                columns.push(Arc::new(next.ok_or_else(|| {
                    DataFusionError::Internal(format!("a GPU aggregate produced no state column {p}"))
                })?));
            }
            let state = DeviceBatch::try_new(
                Arc::clone(&layout.state_schema),
                columns,
                out.groups as usize,
                Arc::clone(&gpu),
                stream,
            )?;
            let _t = m.download_time.timer();
            Ok(state.download()?)
        })
        .await?;
        if input && in_rows > 0 {
            self.choose_again(in_rows, out.num_rows() as u64)?;
        }
        Ok(out)
    }

    /// The cost model's choice for the next chunks, from the groups a chunk of `rows` rows had.
    fn choose_again(&self, rows: u64, groups: u64) -> Result<()> {
        let Some((shape, profile)) = &self.adaptive else { return Ok(()) };
        let observed = AggregateShape { rows: rows as f64, groups: groups.max(1) as f64, chunks: 1.0, ..*shape };
        let best = agg_cost::choose(&observed, profile).best;
        let mut opts =
            self.opts.lock().map_err(|_| DataFusionError::Internal("a GPU aggregate's options lock".into()))?;
        if opts.method != best {
            opts.method = best;
            self.metrics.method_changes.add(1);
        }
        Ok(())
    }

    /// The exec's output from the merged state batch.
    fn output(&self, state: RecordBatch) -> Result<RecordBatch> {
        let a = aggregate(&self.agg)?;
        let schema: SchemaRef = a.schema();
        if !self.layout.final_output {
            return Ok(RecordBatch::try_new(schema, state.columns().to_vec())?);
        }
        let n = state.num_rows();
        let mut columns: Vec<ArrayRef> = state.columns()[..self.layout.groups].to_vec();
        for f in &self.layout.finalize {
            columns.push(match f {
                Finalize::State(p) => Arc::clone(state.column(*p)),
                Finalize::ListLength(p) => {
                    let lists = state.column(*p).as_list_opt::<i32>().ok_or_else(|| {
                        DataFusionError::Internal(format!(
                            "COUNT(DISTINCT)'s state is {}",
                            state.column(*p).data_type()
                        ))
                    })?;
                    let lengths: Int64Array = lists.value_offsets().windows(2).map(|w| (w[1] - w[0]) as i64).collect();
                    Arc::new(lengths)
                }
                Finalize::Evaluate { agg, states } => {
                    let mut acc = a.aggr_expr()[*agg].create_groups_accumulator()?;
                    let groups: Vec<usize> = (0..n).collect();
                    acc.merge_batch(&state.columns()[states.clone()], &groups, n)?;
                    acc.evaluate(EmitTo::All)?
                }
            });
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// A group count as EXPLAIN prints it.
fn fmt_count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.1} M groups", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} K groups", n / 1e3)
    } else {
        format!("{n:.0} groups")
    }
}
