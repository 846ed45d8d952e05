//! `GpuAggregateExec`: DataFusion's `AggregateExec` run by the GPU group-by of
//! [`crate::aggregate`], in every mode.
//!
//! It keeps the original aggregate for its children, properties, statistics and display. Each
//! partition's input is coalesced on the host into chunks of about `gpu.batch_rows` rows; a
//! chunk is uploaded and reduced to DataFusion's intermediate state (group keys and state
//! columns), which stays on the device. Chunk states are concatenated and merged on the GPU by
//! the same group-by over the state columns whenever they add up to a chunk, and once more at
//! the end; for a CPU parent the merged state is downloaded once, and the final values are
//! computed from it (AVG's by DataFusion's own accumulator, one row per group). A GPU parent
//! reads the merged state on the device when it is the output (see [`GpuExec`] below).
//!
//! A Final aggregate above a GPU Partial one (across the `RepartitionExec` or
//! `CoalescePartitionsExec` DataFusion put between them) takes the exchange's place
//! (`gpu.aggregate.exchange`): it runs every partial partition as a task, takes their device
//! states as its input, and splits its output by the exchange's hash, so no state crosses PCIe.

use datafusion::common::not_impl_err;
use std::fmt;
use std::sync::Arc;

use datafusion::common::Statistics;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::distribution_requirements::InputDistributionRequirements;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties, displayable,
};
use futures::{Stream, StreamExt, TryStreamExt};

use super::fuse::FusedInput;
use super::{DeviceBatchStream, GpuExec, blocking};
use crate::aggregate::layout::{AggregateLayout, Finalize};
use crate::aggregate::{AggregateAlgorithmSetting, GroupIdMethod};
use crate::columns::DeviceBatch;
use crate::config::GpuConfig;
use crate::cost::aggregate::AggregateEstimate;
use datafusion::arrow::compute::concat_batches;
use run::Reduced;

mod exchange;
pub use exchange::gpu_partial_below_exchange;
mod run;

use exchange::{Exchange, ExchangeKept};

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
    /// The GPU Partial aggregate below this Final one, when their exchange runs on the device.
    exchange: Option<Arc<Exchange>>,
    /// Why a GPU Partial's exchange below this Final stays on the host, for EXPLAIN, when that
    /// is a choice (see [`GpuAggregateExec::with_exchange`]).
    exchange_kept: Option<String>,
    /// Whether a GPU parent reading the device exchange's output needs it split by the
    /// exchange's hash (see [`GpuAggregateExec::with_hash_split`]).
    hash_split: bool,
    metrics: ExecutionPlanMetricsSet,
}

/// A GPU aggregate's [`AggregateEstimate`] without the profile it was priced with.
pub type AggregateEstimateParts = crate::cost::EstimateParts<crate::cost::aggregate::AggregateShape, GroupIdMethod>;

/// What the rule decided for a GPU aggregate beyond its `AggregateExec`
/// ([`GpuAggregateExec::decisions`]), serializable for a plan sent to another process.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AggregateDecisions {
    /// The cost model's estimate without its profile (the receiving process prices with its own).
    pub estimate: Option<AggregateEstimateParts>,
    /// Whether the filters and projections below run in the aggregate's upload.
    pub fused: bool,
    pub fuse_note: Option<String>,
    pub exchange_kept: Option<String>,
    pub hash_split: bool,
}

fn aggregate(plan: &Arc<dyn ExecutionPlan>) -> Result<&AggregateExec> {
    plan.downcast_ref::<AggregateExec>()
        .ok_or_else(|| DataFusionError::Internal("GpuAggregateExec wraps a plan that is not an AggregateExec".into()))
}

impl GpuAggregateExec {
    /// The GPU form of `agg` (an `AggregateExec`), or why it cannot have one.
    pub fn try_new(agg: Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> crate::error::Result<Self> {
        let layout = {
            let a = aggregate(&agg)?;
            let layout = AggregateLayout::new(a)?;
            for f in &layout.finalize {
                if let Finalize::Evaluate { agg: i, .. } = f
                    && !a.aggr_expr()[*i].groups_accumulator_supported()
                {
                    return not_impl_err!(
                        "`{}` has no groups accumulator to evaluate its state",
                        a.aggr_expr()[*i].name()
                    );
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
            exchange: None,
            exchange_kept: None,
            hash_split: true,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// This exec with the `FilterExec`s and `ProjectionExec`s directly below it evaluated on the
    /// GPU, when every expression can be (`gpu.fuse.expressions`); EXPLAIN says why not otherwise.
    /// Filters are taken in only with `filters` (`gpu.fuse.filters`).
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
            Err(why) => self.fuse_note = Some(crate::error::reason(&why)),
        }
        self
    }

    /// The filters and projections this aggregate evaluates on the GPU, if any.
    /// This exec with its fused input's upload priced (see [`FusedInput::priced`]).
    pub fn with_priced_upload(
        mut self,
        cfg: &GpuConfig,
        gpu: &crate::device::Gpu,
        profile: &crate::cost::Profile,
    ) -> Self {
        self.fused = self.fused.map(|f| Arc::new(f.priced(cfg, gpu, profile)));
        self
    }

    pub fn fused_input(&self) -> Option<&FusedInput> {
        self.fused.as_deref()
    }

    /// This exec with the cost model's estimate; under `gpu.aggregate.algorithm = auto` it runs
    /// the method the model chose.
    pub fn with_estimate(mut self, estimate: AggregateEstimate) -> Self {
        if self.setting == AggregateAlgorithmSetting::Auto {
            self.method = estimate.choice.best;
        }
        self.estimate = Some(Arc::new(estimate));
        self
    }

    /// What the rule decided for this aggregate beyond its `AggregateExec` and fused input,
    /// serializable for a plan sent to another process (`crate::distributed::codec`); an error
    /// for a Final aggregate that merges its Partial stage through a device exchange, whose
    /// two stages a distributed plan keeps apart (a shuffle between them).
    pub fn decisions(&self) -> Result<AggregateDecisions> {
        if self.exchange.is_some() {
            return Err(DataFusionError::NotImplemented(
                "a GPU aggregate with its Partial stage merged on the device (gpu.aggregate.exchange) cannot be sent to another process".into(),
            ));
        }
        Ok(AggregateDecisions {
            estimate: self.estimate.as_deref().map(AggregateEstimate::parts),
            fused: self.fused.is_some(),
            fuse_note: self.fuse_note.clone(),
            exchange_kept: self.exchange_kept.clone(),
            hash_split: self.hash_split,
        })
    }

    /// This exec with the decisions another process's rule made for it ([`Self::decisions`]),
    /// the estimate priced under `profile` (this process's device). The fused input is the
    /// caller's: [`Self::with_fused_input`] before this, when `d.fused`.
    pub fn with_decisions(self, d: AggregateDecisions, profile: Arc<crate::cost::Profile>) -> Self {
        let mut this = match d.estimate {
            Some(e) => self.with_estimate(e.priced(profile)),
            None => self,
        };
        this.fuse_note = d.fuse_note;
        this.exchange_kept = d.exchange_kept;
        this.hash_split = d.hash_split;
        this
    }

    /// The cost model's estimate, when it was consulted.
    pub fn estimate(&self) -> Option<&AggregateEstimate> {
        self.estimate.as_deref()
    }

    /// The `AggregateExec` this replaces.
    pub fn original(&self) -> &Arc<dyn ExecutionPlan> {
        &self.agg
    }

    /// The group-by method this aggregate starts with (its `gpu.aggregate.algorithm` setting
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

    /// The GPU Partial aggregate this Final one merges on the device, if any.
    pub fn partial_stage(&self) -> Option<&GpuAggregateExec> {
        self.exchange.as_ref().map(|e| e.partial.as_ref())
    }

    /// This Final aggregate merging the states of the GPU Partial aggregate below it on the
    /// device, the exchange between them (a hash `RepartitionExec` or a
    /// `CoalescePartitionsExec`) removed, when the plan allows (`gpu.aggregate.exchange`);
    /// otherwise unchanged.
    ///
    /// Unless `host_input` (`gpu.experimental.aggregate_exchange_host_input`), the exchange stays when the
    /// Partial reads a CPU operator whose row count DataFusion does not know exactly (a CPU
    /// join, an unfused filter): its plan-time size is a bound, its partitions often end below
    /// `gpu.cost.min_rows` and run on the CPU, and then DataFusion's exchange streams each one's
    /// states to the Final as it finishes, where the device exchange waits for the last of them
    /// (TPC-H q16's two distinct-count stages, whose every partition ran on the CPU, ran 6-8%
    /// slower than DataFusion's at SF 10 on an H100, and at its speed with the exchange kept).
    pub fn with_exchange(mut self, host_input: bool) -> Self {
        match self.exchange_below(host_input) {
            Ok(ex) => {
                self.exchange = Some(Arc::new(ex));
                self
            }
            Err(ExchangeKept::Choice(why)) => {
                self.exchange_kept = Some(why);
                self
            }
            Err(ExchangeKept::Plan) => self,
        }
    }

    /// A copy of this exec (the same plan, its exchange's output not yet made) with `metrics`.
    fn duplicate(&self, metrics: ExecutionPlanMetricsSet) -> GpuAggregateExec {
        GpuAggregateExec {
            agg: Arc::clone(&self.agg),
            layout: Arc::clone(&self.layout),
            setting: self.setting,
            method: self.method,
            estimate: self.estimate.clone(),
            fused: self.fused.clone(),
            fuse_note: self.fuse_note.clone(),
            exchange: self.exchange.as_ref().map(|e| Arc::new(e.with_partial(Arc::clone(&e.partial)))),
            exchange_kept: self.exchange_kept.clone(),
            hash_split: self.hash_split,
            metrics,
        }
    }

    /// This exec over new `children` with its properties recomputed from them, where
    /// `with_new_children` keeps those of the nodes it fused (for display and statistics): the
    /// fused chain and the aggregate are rebuilt over the new input. With a device exchange, the
    /// partial stage is rebuilt so, and the Final's own partitioning stays as planned.
    pub fn over_inputs(&self, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<GpuAggregateExec> {
        let recompute = || ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        if let Some(ex) = &self.exchange {
            let partial = Arc::new(ex.partial.over_inputs(children)?);
            let exchange = Some(Arc::new(ex.with_partial(partial)));
            return Ok(GpuAggregateExec { exchange, ..self.duplicate(ExecutionPlanMetricsSet::new()) });
        }
        let (agg, fused) = match &self.fused {
            Some(f) => {
                let [input] = <[_; 1]>::try_from(children).map_err(|c: Vec<_>| {
                    DataFusionError::Internal(format!("GpuAggregateExec takes one child, not {}", c.len()))
                })?;
                let fused = f.over(input)?;
                // The aggregate reads the chain's top node, or the input itself when only its
                // argument expressions were fused (no nodes taken in).
                let top = fused.chain.first().unwrap_or(&fused.input);
                (Arc::clone(&self.agg).replace_children(vec![Arc::clone(top)], recompute())?, Some(Arc::new(fused)))
            }
            None => (Arc::clone(&self.agg).replace_children(children, recompute())?, None),
        };
        Ok(GpuAggregateExec { agg, fused, ..self.duplicate(ExecutionPlanMetricsSet::new()) })
    }

    /// Whether the Partial stage below this Final runs in this exec (a device exchange).
    pub fn has_device_exchange(&self) -> bool {
        self.exchange.is_some()
    }

    /// This exec with `hash_split` set: whether its device exchange's output, read on the device
    /// by a GPU parent, must follow the hash partitioning the plan declares for it. It must
    /// when an operator above pairs partition `i` of this output with partition `i` of another
    /// input (a partitioned join, an interleave), which the rule finds (the default: it must).
    /// Otherwise the merged state stays on the device whole, in one partition. (A CPU parent
    /// always gets the declared partitions; the rule leaves the default there.)
    pub fn with_hash_split(&self, hash_split: bool) -> GpuAggregateExec {
        GpuAggregateExec { hash_split, ..self.duplicate(ExecutionPlanMetricsSet::new()) }
    }

    /// Whether this aggregate merges its partial stage's states through a device exchange whose
    /// output the plan declares hash partitioned.
    pub fn splits_by_hash(&self) -> bool {
        self.exchange.as_ref().is_some_and(|e| e.hash.is_some())
    }

    /// Whether a GPU parent's device reads of the output follow the declared hash partitioning.
    pub fn hash_split(&self) -> bool {
        self.hash_split
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
                        ", algorithm={} (gpu.aggregate.algorithm={}; {})",
                        self.method.name(),
                        self.setting,
                        e.verdict.describe()
                    )?,
                    None => write!(f, ", algorithm={} (gpu.aggregate.algorithm={})", self.method.name(), self.setting)?,
                }
                if let Some(why) = &self.exchange_kept {
                    write!(f, ", {why}")?;
                }
                if let Some(ex) = &self.exchange {
                    let partial = displayable(ex.partial.as_ref()).one_line().to_string();
                    write!(
                        f,
                        ", merges on the device the states of [{}] (exchange removed: {})",
                        partial.trim_end(),
                        ex.removed
                    )?;
                    if ex.hash.is_some() && !self.hash_split {
                        write!(f, ", a GPU parent reads the merged state whole on the device")?;
                    }
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
                if let Ok(Some(d)) = self.device_input() {
                    write!(f, ", reads {}'s batches on the device", d.exec.name())?;
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
        if let Some(ex) = &self.exchange {
            return ex.partial.children();
        }
        match &self.fused {
            Some(f) => vec![&f.input],
            None => self.agg.children(),
        }
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        match &self.exchange {
            Some(ex) => self.agg.apply_expressions(f)?.visit_sibling(|| ex.partial.apply_expressions(f)),
            None => self.agg.apply_expressions(f),
        }
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        if let Some(ex) = &self.exchange {
            return ex.partial.input_distribution_requirements();
        }
        self.agg.input_distribution_requirements()
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(ex) = &self.exchange {
            // The Final keeps its original chain (display, statistics); the partial stage reads
            // the new input.
            let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
            let partial = (Arc::clone(&ex.partial) as Arc<dyn ExecutionPlan>).replace_children(children, recompute)?;
            let partial = partial
                .downcast_ref::<GpuAggregateExec>()
                .ok_or_else(|| DataFusionError::Internal("a GPU aggregate's partial stage is no longer one".into()))?;
            let partial = Arc::new(partial.duplicate(ExecutionPlanMetricsSet::new()));
            let exchange = Some(Arc::new(ex.with_partial(partial)));
            return Ok(Arc::new(GpuAggregateExec { exchange, ..self.duplicate(ExecutionPlanMetricsSet::new()) }));
        }
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
        Ok(Arc::new(GpuAggregateExec { agg, fused, ..self.duplicate(ExecutionPlanMetricsSet::new()) }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.duplicate(ExecutionPlanMetricsSet::new())))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        if let Some(ex) = &self.exchange {
            // A copy that shares this exec's metrics, for the work that makes the output. It holds
            // a copy of the exchange, not this one, whose output slot holds that work.
            let this = self.duplicate(self.metrics.clone());
            let ex = Arc::clone(ex);
            let batches = futures::stream::once(async move {
                let make = || async move {
                    let copy = this
                        .exchange
                        .clone()
                        .ok_or_else(|| DataFusionError::Internal("a GPU aggregate's copy lost its exchange".into()))?;
                    this.exchange_output(&copy, context).await.map(Arc::new)
                };
                let all = ex.output.get_or_start(make).await?;
                let mine = all.get(partition).cloned().ok_or_else(|| {
                    DataFusionError::Internal(format!("a GPU aggregate has no output partition {partition}"))
                })?;
                Ok::<_, DataFusionError>(mine)
            });
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, flatten_batches(batches))));
        }
        let run = self.new_run(partition, &context)?;
        let input = self.execute_input(partition, &context, &run.gpu)?;
        let batches = futures::stream::once(run.run(input));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, flatten_batches(batches))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        if let Some(ex) = &self.exchange {
            // The partial stage reads every input partition for each output one.
            return ex.partial.child_stats_requests(None);
        }
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
        if let Some(ex) = &self.exchange {
            let partial = ex.partial.statistics_from_inputs(input_stats, args)?;
            return self.agg.statistics_from_inputs(&[partial], args);
        }
        match (&self.fused, input_stats) {
            (Some(f), [input]) => self.agg.statistics_from_inputs(&[f.statistics(input, args)?], args),
            _ => self.agg.statistics_from_inputs(input_stats, args),
        }
    }
}

impl GpuExec for GpuAggregateExec {
    /// The output for a GPU parent: the merged state stays on the device when it is the output
    /// (see [`AggregateLayout::device_output`]); otherwise (AVG, COUNT(DISTINCT), a partition
    /// DataFusion aggregated on the CPU) the host output is uploaded.
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let schema = self.schema();
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = crate::exec::partition_gpu(&cfg, &context, partition)?;
        let part: futures::future::BoxFuture<'static, Result<Reduced>> =
            match (self.layout.device_output(&schema), &self.exchange) {
                (None, _) => {
                    let host = self.execute(partition, context)?;
                    Box::pin(async move { host.try_collect().await.map(Reduced::Host) })
                }
                (Some(columns), Some(ex)) => {
                    let this = self.duplicate(self.metrics.clone());
                    let ex = Arc::clone(ex);
                    Box::pin(async move {
                        let make = || async move {
                            let copy = this.exchange.clone().ok_or_else(|| {
                                DataFusionError::Internal("a GPU aggregate's copy lost its exchange".into())
                            })?;
                            this.exchange_device_output(&copy, columns, context).await.map(Arc::new)
                        };
                        let all = ex.device_output.get_or_start(make).await?;
                        let slot = all.get(partition).ok_or_else(|| {
                            DataFusionError::Internal(format!("a GPU aggregate has no output partition {partition}"))
                        })?;
                        let taken = slot
                            .lock()
                            .map_err(|_| DataFusionError::Internal("a GPU aggregate's output lock".into()))?
                            .take();
                        taken.ok_or_else(|| {
                            DataFusionError::Internal(format!(
                                "a GPU aggregate's output partition {partition} was read twice"
                            ))
                        })
                    })
                }
                (Some(columns), None) => {
                    let run = self.new_run(partition, &context)?;
                    let input = self.execute_input(partition, &context, &run.gpu)?;
                    Box::pin(async move { run.run_for_device(input, &columns, &schema).await })
                }
            };
        let batches = futures::stream::once(async move {
            match part.await? {
                Reduced::Device(b) => Ok(vec![b]),
                Reduced::Host(out) if out.iter().all(|b| b.num_rows() == 0) => Ok(Vec::new()),
                // The host output, uploaded as one batch.
                Reduced::Host(out) => {
                    blocking(move || {
                        let host = concat_batches(&out[0].schema(), &out)?;
                        Ok(vec![DeviceBatch::upload(&gpu, &gpu.stream(), &host)?])
                    })
                    .await
                }
            }
        });
        Ok(Box::pin(flatten_batches(batches)))
    }
}

/// Per-partition metrics.
#[derive(Clone)]
struct Metrics {
    upload_time: Time,
    /// The part of upload_time spent packing and assembling columns on the host.
    pack_time: Time,
    project_time: Time,
    group_ids_time: Time,
    aggregate_time: Time,
    materialize_time: Time,
    download_time: Time,
    concat_time: Time,
    /// Splitting the output into the removed exchange's hash partitions.
    partition_time: Time,
    input_rows: Count,
    chunks: Count,
    merges: Count,
    /// Batches the partition group-by handed to the hash path (see aggregate::partition).
    hash_fallbacks: Count,
    /// Times the run-time choice changed the group-by method (under `auto`).
    method_changes: Count,
    /// Partitions whose whole input had fewer than `gpu.cost.min_rows` rows, aggregated by
    /// DataFusion on the CPU instead.
    cpu_partitions: Count,
    /// Exchanges whose partial states were merged on the CPU, by DataFusion's exchange and
    /// Final aggregate (see [`GpuAggregateExec::exchange_output`]).
    cpu_merges: Count,
    /// Partitions (and device exchanges) the GPU could not finish for want of device memory,
    /// finished by DataFusion's aggregate on their replayed input (`gpu.memory.cpu_fallback`).
    cpu_fallbacks: Count,
    /// Rows a fused filter removed on the host before the upload (see [`fuse::HostPrefilter`]).
    host_filtered_rows: Count,
    /// Partitions whose fused filter kept few enough rows to run on the host as well.
    host_filter_partitions: Count,
    output_rows: Count,
}

impl Metrics {
    fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let b = || MetricBuilder::new(set);
        Metrics {
            upload_time: b().subset_time("upload_time", partition),
            pack_time: b().subset_time("pack_time", partition),
            project_time: b().subset_time("project_time", partition),
            group_ids_time: b().subset_time("group_ids_time", partition),
            aggregate_time: b().subset_time("aggregate_time", partition),
            materialize_time: b().subset_time("materialize_time", partition),
            download_time: b().subset_time("download_time", partition),
            concat_time: b().subset_time("concat_time", partition),
            partition_time: b().subset_time("partition_time", partition),
            input_rows: b().counter("input_rows", partition),
            chunks: b().counter("chunks", partition),
            merges: b().counter("merges", partition),
            hash_fallbacks: b().counter("hash_fallbacks", partition),
            method_changes: b().counter("method_changes", partition),
            cpu_partitions: b().counter("cpu_partitions", partition),
            cpu_merges: b().counter("cpu_merges", partition),
            cpu_fallbacks: b().counter("cpu_fallbacks", partition),
            host_filtered_rows: b().counter("host_filtered_rows", partition),
            host_filter_partitions: b().counter("host_filter_partitions", partition),
            output_rows: b().output_rows(partition),
        }
    }
}

/// The batches of a stream of batch lists (or its error).
fn flatten_batches<B: Send + 'static>(
    lists: impl Stream<Item = Result<Vec<B>>> + Send + 'static,
) -> impl Stream<Item = Result<B>> + Send + 'static {
    lists
        .map(|r| {
            futures::stream::iter(match r {
                Ok(v) => v.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
        })
        .flatten()
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
