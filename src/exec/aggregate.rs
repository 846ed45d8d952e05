//! `GpuAggregateExec`: DataFusion's `AggregateExec` run by the GPU group-by of
//! [`crate::aggregate`], in every mode.
//!
//! It keeps the original aggregate for its children, properties, statistics and display. Each
//! partition's input is coalesced on the host into chunks of about `gpu.batch_rows` rows; a
//! chunk is uploaded and reduced to DataFusion's intermediate state (group keys and state
//! columns), which stays on the device. Chunk states are concatenated and merged on the GPU by
//! the same group-by over the state columns whenever they add up to a chunk, and once more at
//! the end; the merged state is downloaded once, and the final values are computed from it
//! (AVG's by DataFusion's own accumulator, one row per group).
//!
//! A Final aggregate above a GPU Partial one (across the `RepartitionExec` or
//! `CoalescePartitionsExec` DataFusion put between them) takes the exchange's place
//! (`gpu.aggregate_exchange`): it runs every partial partition as a task, takes their device
//! states as its input, and splits its output by the exchange's hash, so no state crosses PCIe.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Statistics;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::distribution_requirements::InputDistributionRequirements;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::repartition::{BatchPartitioner, RepartitionExec};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PhysicalExpr, PlanProperties, displayable,
};
use futures::{Stream, StreamExt};

use super::fuse::{self, FusedInput, PrefilterCounters};
use super::once::OnceShared;
use super::replay::{DeviceReplay, HandedStream, Replay};
use super::upload::ChunkUploader;
use super::{DeviceBatchStream, GpuExec, as_gpu_exec, blocking, rows_within_limit, timeline};
use crate::aggregate::layout::{AggregateLayout, Finalize};
use crate::aggregate::{AggregateAlgorithmSetting, GroupByOptions, GroupByTimes, GroupIdMethod, group_by};
use crate::columns::{DeviceBatch, DeviceColumn};
use crate::config::GpuConfig;
use crate::cost::Profile;
use crate::cost::aggregate::{self as agg_cost, AggregateEstimate, AggregateShape};
use crate::device::Gpu;
use crate::error::{gpu_error, recoverable_on_cpu};

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
    metrics: ExecutionPlanMetricsSet,
}

/// A Final aggregate's partial stage on the same GPU, the exchange between them (DataFusion's
/// `RepartitionExec` or `CoalescePartitionsExec`) removed: every partial partition's state stays
/// on the device and the Final merges them there, so no state crosses PCIe. One GPU does all the
/// work, so the exchange's hashing adds nothing; the Final's output keeps the partitioning its
/// parents were planned for, split on the host by DataFusion's own hash partitioner.
#[derive(Debug)]
struct Exchange {
    partial: Arc<GpuAggregateExec>,
    /// The removed exchange, for EXPLAIN.
    removed: String,
    /// Position in the partial's state of each column the Final reads, in its upload order.
    columns: Vec<usize>,
    /// The exchange's hash partitioning, over the group columns (which the Final's output holds
    /// at the same positions); `None` for one output partition.
    hash: Option<(Vec<Arc<dyn PhysicalExpr>>, usize)>,
    /// The output of every partition, made once.
    output: OnceShared<Arc<Vec<Vec<RecordBatch>>>>,
}

/// Why [`GpuAggregateExec::with_exchange`] removes no exchange.
enum ExchangeKept {
    /// The plan has none that can go (why is not shown).
    Plan,
    /// One could go, but this one is better kept (shown in EXPLAIN).
    Choice(String),
}

impl Exchange {
    /// The same exchange over a new partial stage, with its output not yet made.
    fn with_partial(&self, partial: Arc<GpuAggregateExec>) -> Exchange {
        Exchange {
            partial,
            removed: self.removed.clone(),
            columns: self.columns.clone(),
            hash: self.hash.clone(),
            output: OnceShared::default(),
        }
    }
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
                if let Finalize::Evaluate { agg: i, .. } = f
                    && !a.aggr_expr()[*i].groups_accumulator_supported()
                {
                    return Err(format!(
                        "`{}` has no groups accumulator to evaluate its state",
                        a.aggr_expr()[*i].name()
                    ));
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

    /// The GPU Partial aggregate this Final one merges on the device, if any.
    pub fn partial_stage(&self) -> Option<&GpuAggregateExec> {
        self.exchange.as_ref().map(|e| e.partial.as_ref())
    }

    /// This Final aggregate merging the states of the GPU Partial aggregate below it on the
    /// device, the exchange between them (a hash `RepartitionExec` or a
    /// `CoalescePartitionsExec`) removed, when the plan allows (`gpu.aggregate_exchange`);
    /// otherwise unchanged.
    ///
    /// Unless `host_input` (`gpu.aggregate_exchange_host_input`), the exchange stays when the
    /// Partial reads a CPU operator whose row count DataFusion does not know exactly (a CPU
    /// join, an unfused filter): its plan-time size is a bound, its partitions often end below
    /// `gpu.min_rows` and run on the CPU, and then DataFusion's exchange streams each one's
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

    /// The exchange [`Self::with_exchange`] removes, or why there is none.
    fn exchange_below(&self, host_input: bool) -> std::result::Result<Exchange, ExchangeKept> {
        self.device_exchange().map_err(|_| ExchangeKept::Plan).and_then(|ex| {
            if host_input {
                return Ok(ex);
            }
            match ex.partial.unsized_host_input() {
                Some(why) => Err(ExchangeKept::Choice(why)),
                None => Ok(ex),
            }
        })
    }

    /// When this (Partial) aggregate reads a CPU operator of unknown size, which one.
    fn unsized_host_input(&self) -> Option<String> {
        if self.device_input().ok().flatten().is_some() {
            return None;
        }
        let node = match &self.fused {
            Some(f) => &f.input,
            None => aggregate(&self.agg).ok()?.input(),
        };
        if super::statistics::exact_rows(node).is_some() {
            return None;
        }
        // A CPU fallback names the operator it keeps; a GPU aggregate hands its output over on
        // the host.
        let input = match node.name() {
            crate::exec::fallback::CPU_FALLBACK_NAME => {
                format!("a {} on the CPU", node.children().first().map_or(node.name(), |c| c.name()))
            }
            name if node.downcast_ref::<GpuAggregateExec>().is_some() => format!("the host output of a {name}"),
            name => format!("a {name} on the CPU"),
        };
        Some(format!(
            "exchange kept on the host: the partial reads {input}, of unknown size, whose partitions may run on the \
             CPU (gpu.aggregate_exchange_host_input)"
        ))
    }

    /// The exchange [`Self::with_exchange`] may remove, or why the plan allows none.
    fn device_exchange(&self) -> std::result::Result<Exchange, String> {
        let a = aggregate(&self.agg).map_err(|e| e.to_string())?;
        if !matches!(a.mode(), AggregateMode::Final | AggregateMode::FinalPartitioned) {
            return Err(format!("a {:?} aggregate has no partial stage", a.mode()));
        }
        if self.fused.is_some() {
            return Err("its input is fused".into());
        }
        let exchange = a.input();
        let out_partitions = self.agg.output_partitioning().partition_count();
        let (below, hash) = if let Some(r) = exchange.downcast_ref::<RepartitionExec>() {
            let Partitioning::Hash(exprs, n) = r.partitioning() else {
                return Err(format!("the exchange below is a {} repartition", r.partitioning()));
            };
            if r.preserve_order() || *n != out_partitions {
                return Err("the repartition below keeps an order or changes the partition count".into());
            }
            (r.input(), Some((exprs.clone(), *n)))
        } else if let Some(c) = exchange.downcast_ref::<CoalescePartitionsExec>() {
            if c.fetch().is_some() || out_partitions != 1 {
                return Err("the coalesce below has a fetch".into());
            }
            (c.input(), None)
        } else {
            return Err(format!("its input is a {}, not an exchange", exchange.name()));
        };
        let partial = below
            .downcast_ref::<GpuAggregateExec>()
            .ok_or_else(|| format!("the exchange's input is a {}, not a GPU aggregate", below.name()))?;
        let p = aggregate(&partial.agg).map_err(|e| e.to_string())?;
        if p.mode() != &AggregateMode::Partial || partial.layout.final_output {
            return Err(format!("the aggregate below the exchange is {:?}", p.mode()));
        }
        // The Final reads plain columns of the partial's state, group columns in place.
        let state = &partial.layout.state_schema;
        let mut columns = Vec::with_capacity(self.layout.upload.len());
        for (i, (e, f)) in self.layout.upload.iter().zip(self.layout.upload_schema.fields()).enumerate() {
            let c = e.downcast_ref::<Column>().ok_or_else(|| format!("the Final reads `{e}`, not a column"))?;
            let want = state.fields().get(c.index()).map(|s| s.data_type());
            if want != Some(f.data_type()) || (i < self.layout.groups && c.index() != i) {
                return Err(format!("the Final's column `{e}` does not match the partial state"));
            }
            columns.push(c.index());
        }
        if let Some((exprs, _)) = &hash {
            for e in exprs {
                match e.downcast_ref::<Column>() {
                    Some(c) if c.index() < self.layout.groups => {}
                    _ => return Err(format!("the exchange hashes `{e}`, not a group column")),
                }
            }
        }
        Ok(Exchange {
            partial: Arc::new(partial.duplicate(ExecutionPlanMetricsSet::new())),
            removed: displayable(exchange.as_ref()).one_line().to_string().trim_end().to_string(),
            columns,
            hash,
            output: OnceShared::default(),
        })
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
            metrics,
        }
    }

    /// The input stream of `partition` (through the fused input when there is one).
    fn execute_input(&self, partition: usize, context: &Arc<TaskContext>) -> Result<Input> {
        if let Some(DeviceInput { exec, columns, schema }) = self.device_input()? {
            let batches = exec.execute_device(partition, Arc::clone(context))?;
            return Ok(Input::Device { batches, columns, schema });
        }
        match &self.fused {
            Some(f) => f.input.execute(partition, Arc::clone(context)).map(Input::Host),
            None => aggregate(&self.agg)?.input().execute(partition, Arc::clone(context)).map(Input::Host),
        }
    }

    /// When the node this aggregate reads is a GPU exec: that exec, the columns of its output
    /// this aggregate groups (the fused kernels' inputs, or the layout's plain columns), and
    /// their schema. Its batches then stay on the device. `None` when the input comes from the
    /// host, or when the layout has expressions DataFusion must evaluate first.
    fn device_input(&self) -> Result<Option<DeviceInput<'_>>> {
        let (node, columns, schema) = match &self.fused {
            Some(f) => (&f.input, Some(f.projection.inputs.clone()), Arc::clone(&f.projection.upload_schema)),
            None => {
                let columns =
                    self.layout.upload.iter().map(|e| e.downcast_ref::<Column>().map(Column::index)).collect();
                (aggregate(&self.agg)?.input(), columns, Arc::clone(&self.layout.upload_schema))
            }
        };
        Ok(match (as_gpu_exec(node), columns) {
            (Some(exec), Some(columns)) => Some(DeviceInput { exec, columns, schema }),
            _ => None,
        })
    }

    /// The work of one partition.
    fn new_run(&self, partition: usize, context: &Arc<TaskContext>) -> Result<Run> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = Gpu::for_session(&cfg, &context.session_id())?;
        // Under `auto` the plan's group count is often DataFusion's fallback (the input's rows,
        // without distinct counts): the first chunk runs the hash group-by, and the cost model
        // chooses again for the next chunks and merges from the group count it found.
        let adaptive = match (&self.estimate, self.setting) {
            (Some(e), AggregateAlgorithmSetting::Auto) => {
                Some((e.shape, Arc::new(crate::cost::profile::load(gpu.info(), &cfg.profile_dir))))
            }
            _ => None,
        };
        let host_upload_ns_per_row = self.fused.as_deref().and_then(|f| fuse::upload_ns_per_row(f, &cfg, &gpu));
        // Chunks of every partition (each gathered, then concatenated, then grouped) take at
        // most a quarter of the memory limit between them.
        let chunk_rows = cfg.batch_rows.max(1).min(rows_within_limit(
            &gpu,
            2 * context.session_config().target_partitions() as u64,
            crate::columns::row_width(&self.layout.upload_schema),
        ) as usize);
        Ok(Run {
            gpu,
            fused: self.fused.clone(),
            filtered_on_host: Arc::new(OnceLock::new()),
            layout: Arc::clone(&self.layout),
            agg: Arc::clone(&self.agg),
            opts: std::sync::Mutex::new(GroupByOptions { method: self.first_method(), ..GroupByOptions::default() }),
            adaptive,
            chunk_rows,
            batch_size: context.session_config().batch_size().max(1),
            min_rows: cfg.min_rows,
            cpu_fallback: cfg.cpu_fallback,
            grouped: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            partition,
            host_filter_below: cfg.host_filter_below,
            host_upload_ns_per_row,
            context: Arc::clone(context),
            metrics: Metrics::new(&self.metrics, partition),
            who: match timeline::enabled() {
                true => {
                    let a = aggregate(&self.agg)?;
                    let keys: Vec<String> = a.group_expr().expr().iter().map(|(_, n)| n.clone()).collect();
                    format!("aggregate {:?} [{}] p{partition}", a.mode(), keys.join(", "))
                }
                false => String::new(),
            },
        })
    }

    /// The output of every partition of a Final aggregate with its partial stage on the device:
    /// each input partition of the partial stage reduced to a device state by its own task, the
    /// states merged by the Final as they come, and the result split by the exchange's hash.
    async fn exchange_output(&self, ex: &Exchange, context: Arc<TaskContext>) -> Result<Vec<Vec<RecordBatch>>> {
        let partial = &ex.partial;
        let inputs = partial.children().first().map_or(1, |c| c.output_partitioning().partition_count());
        let mut tasks = futures::stream::FuturesUnordered::new();
        for i in 0..inputs {
            let mut run = partial.new_run(i, &context)?;
            // One exec does both stages: the partial's work shows in this exec's metrics.
            run.metrics = Metrics::new(&self.metrics, i);
            let input = partial.execute_input(i, &context)?;
            tasks.push(SpawnedTask::spawn(async move { run.reduce_or_cpu(input).await }));
        }
        // Every partition's partial stage chooses the GPU or (a small input) the CPU as it
        // goes; the merge waits for all of them. When at least as many state rows are on the
        // host as on the device, the states are merged on the host, by DataFusion's own
        // exchange and Final aggregate on all cores, after the device states are downloaded:
        // the output goes to the host either way, and a GPU merge would upload more state rows
        // than this downloads, then download its output. When every partition ran on the CPU,
        // one GPU merge of host states (an upload, one reduce, a download and the split) is
        // slower than DataFusion's (TPC-H q16's distinct-count stages: 1.2 M state rows, 16
        // partitions of 74 K input rows each); TPC-H q2's minimum by part key had 9 of its 16
        // partitions on the CPU.
        let mut reduced = Vec::with_capacity(inputs);
        while let Some(joined) = tasks.next().await {
            reduced.push(
                joined.map_err(|e| DataFusionError::Execution(format!("a GPU partial aggregate failed: {e}")))??,
            );
        }
        let run = self.new_run(0, &context)?;
        let state_rows = |on_host: bool| -> usize {
            reduced
                .iter()
                .map(|r| match r {
                    Reduced::Host(states) if on_host => states.iter().map(|b| b.num_rows()).sum(),
                    Reduced::Device(state) if !on_host => state.num_rows(),
                    _ => 0,
                })
                .sum()
        };
        if !reduced.is_empty() && state_rows(true) >= state_rows(false) {
            let parts = states_on_host(partial, &run, reduced).await?;
            return self.exchange_on_cpu(&run, parts, &context).await;
        }
        // The states the device merge reads share their device memory with these: when the
        // merge runs out of memory they are merged on the CPU instead.
        let kept: Option<Vec<Reduced>> = run.cpu_fallback.then(|| reduced.clone());
        let (schema, columns) = (Arc::clone(&self.layout.upload_schema), ex.columns.clone());
        // DataFusion's partial states have the partial aggregate's schema.
        let (gpu, state_schema) = (Arc::clone(&run.gpu), partial.agg.schema());
        let states = futures::stream::iter(reduced).then(move |r| {
            let (schema, columns, gpu, state_schema) =
                (Arc::clone(&schema), columns.clone(), Arc::clone(&gpu), Arc::clone(&state_schema));
            async move {
                let state = match r {
                    Reduced::Device(state) => state,
                    // DataFusion's partial states, in the layout of this exec's.
                    Reduced::Host(states) => {
                        let schema = states.first().map_or(state_schema, |b| b.schema());
                        blocking(move || {
                            let host = concat_batches(&schema, &states)?;
                            DeviceBatch::upload_transient(&gpu, &gpu.stream(), &host)
                        })
                        .await?
                    }
                };
                Ok(Piece::Device(state.select(&columns, &schema)?))
            }
        });
        let state = match (run.reduce(Box::pin(states)).await, kept) {
            (Ok(state), _) => state,
            (Err(e), Some(kept)) if recoverable_on_cpu(&e) => {
                log::debug!("a GPU aggregate's device exchange merges on the CPU: {e}");
                run.metrics.cpu_fallbacks.add(1);
                let parts = states_on_host(partial, &run, kept).await?;
                return self.exchange_on_cpu(&run, parts, &context).await;
            }
            (Err(e), _) => return Err(e),
        };
        // The host work the exchange's partitions did in parallel (finalising, hashing) is
        // spread over as many tasks.
        let threads = ex.hash.as_ref().map_or(1, |(_, n)| *n).max(inputs);
        run.finish_split(state, ex.hash.clone(), threads).await
    }

    /// The removed exchange and this Final aggregate, DataFusion's own, over the partial states
    /// of every input partition on the host (`parts`, one entry per input partition): the
    /// output partitions the exchange and the Final would have made.
    async fn exchange_on_cpu(
        &self,
        run: &Run,
        parts: Vec<Vec<RecordBatch>>,
        context: &Arc<TaskContext>,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        let a = aggregate(&self.agg)?;
        let exchange = Arc::clone(a.input());
        let schema = exchange.schema();
        let rows: usize = parts.iter().flatten().map(|b| b.num_rows()).sum();
        timeline::mark(&run.who, || format!("{rows} partial state rows merged on the CPU"));
        run.metrics.cpu_merges.add(1);
        let source: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(&parts, schema, None)?;
        let recompute = || ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let exchange = exchange.replace_children(vec![source], recompute())?;
        let agg = Arc::clone(&self.agg).replace_children(vec![exchange], recompute())?;
        let out = datafusion::physical_plan::collect_partitioned(agg, Arc::clone(context)).await?;
        run.metrics.output_rows.add(out.iter().flatten().map(|b| b.num_rows()).sum());
        Ok(out)
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
        let input = self.execute_input(partition, &context)?;
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
    /// Partitions whose whole input had fewer than `gpu.min_rows` rows, aggregated by
    /// DataFusion on the CPU instead.
    cpu_partitions: Count,
    /// Exchanges whose partial states were merged on the CPU, by DataFusion's exchange and
    /// Final aggregate (see [`GpuAggregateExec::exchange_output`]).
    cpu_merges: Count,
    /// Partitions (and device exchanges) the GPU could not finish for want of device memory,
    /// finished by DataFusion's aggregate on their replayed input (`gpu.cpu_fallback`).
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

/// One partition's execution.
struct Run {
    gpu: Arc<Gpu>,
    fused: Option<Arc<FusedInput>>,
    /// The fused kernels without the filter the host applies to every row of this partition,
    /// once it has chosen to (see [`Run::prefiltered`]).
    filtered_on_host: Arc<OnceLock<Arc<FusedInput>>>,
    layout: Arc<AggregateLayout>,
    agg: Arc<dyn ExecutionPlan>,
    /// How the next group-by runs (changed by the run-time choice).
    opts: std::sync::Mutex<GroupByOptions>,
    /// Under `auto`: the plan's shape and the profile, to choose again on observed groups.
    adaptive: Option<(AggregateShape, Arc<Profile>)>,
    chunk_rows: usize,
    batch_size: usize,
    /// A partition whose whole input has fewer rows runs on the CPU (`gpu.min_rows`).
    min_rows: usize,
    /// `gpu.cpu_fallback`: finish on the CPU when device memory runs out.
    cpu_fallback: bool,
    /// Chunks of input rows grouped so far (a device input is kept for the CPU until the first).
    grouped: Arc<std::sync::atomic::AtomicUsize>,
    partition: usize,
    /// `gpu.host_filter_below`: see [`fuse::HostPrefilter`].
    host_filter_below: f64,
    /// With `gpu.host_filter_priced`: what uploading one row of the fused input costs this
    /// partition, in nanoseconds (see [`crate::exec::fuse::priced_mode`]).
    host_upload_ns_per_row: Option<f64>,
    context: Arc<TaskContext>,
    metrics: Metrics,
    /// The name of this run in the debug timeline (empty when the timeline is off).
    who: String,
}

/// The GPU exec an aggregate reads on the device, the columns of its output the aggregate
/// groups, and their schema (see [`GpuAggregateExec::device_input`]).
struct DeviceInput<'a> {
    exec: &'a dyn GpuExec,
    columns: Vec<usize>,
    schema: SchemaRef,
}

/// A partition's input: host batches, or the device batches of a GPU exec below (with the
/// columns of them this aggregate reads, and their schema).
enum Input {
    Host(SendableRecordBatchStream),
    Device { batches: DeviceBatchStream, columns: Vec<usize>, schema: SchemaRef },
}

/// A partition's input reduced on the device (the state) or on the CPU (DataFusion's output).
/// A clone shares the device state's memory.
#[derive(Clone)]
enum Reduced {
    Device(DeviceBatch),
    Host(Vec<RecordBatch>),
}

/// Rows a [`Run`] reduces: host rows (projected to what the aggregate uploads) or device rows
/// (already in the order the aggregate reads them).
enum Piece {
    Host(RecordBatch),
    Device(DeviceBatch),
}

impl Piece {
    fn num_rows(&self) -> usize {
        match self {
            Piece::Host(b) => b.num_rows(),
            Piece::Device(b) => b.num_rows(),
        }
    }
}

impl Run {
    /// This partition's output batches from its host input. The first `gpu.min_rows` rows are
    /// read before anything is uploaded: when the input ends sooner, the plan's estimate was
    /// too high (sizes after joins and filters are guesses) and DataFusion's aggregate, with the
    /// filters and projections fused into this one, gives the output on the CPU: a GPU group-by
    /// has a fixed cost of transfers, launches and synchronisations that so few rows do not
    /// repay. That CPU aggregate reads the rows as they arrive (see [`Run::reduce_or_cpu`]).
    async fn run(self, input: Input) -> Result<Vec<RecordBatch>> {
        match self.reduce_or_cpu(input).await? {
            Reduced::Device(state) => self.finish(state).await,
            Reduced::Host(out) => {
                self.metrics.output_rows.add(out.iter().map(|b| b.num_rows()).sum());
                Ok(out)
            }
        }
    }

    /// `input` reduced to a state on the device, or, for fewer than `gpu.min_rows` rows,
    /// DataFusion's output on the host (see [`Run::run`]).
    async fn reduce_or_cpu(&self, input: Input) -> Result<Reduced> {
        let mut input = match input {
            Input::Host(input) => input,
            // Rows already on the device are grouped there, however few.
            Input::Device { batches, columns, schema } => {
                let rows = self.metrics.input_rows.clone();
                // Until its first chunk is grouped the input is kept, so that DataFusion's
                // aggregate can take the partition over if device memory runs out.
                let (replay, batches) = match self.cpu_fallback {
                    true => {
                        let (r, b) = DeviceReplay::new(batches, Arc::clone(&self.grouped));
                        (Some(r), b)
                    }
                    false => (None, batches),
                };
                let pieces = batches.map(move |b| {
                    let b = b?;
                    rows.add(b.num_rows());
                    Ok(Piece::Device(b.select(&columns, &schema)?))
                });
                let failed = match (self.reduce(Box::pin(pieces)).await, replay) {
                    (Ok(state), _) => return Ok(Reduced::Device(state)),
                    (Err(e), Some(replay)) if recoverable_on_cpu(&e) && !replay.input_failed() => (e, replay),
                    (Err(e), _) => return Err(e),
                };
                let (failed, replay) = failed;
                let input_schema = match &self.fused {
                    Some(f) => f.input.schema(),
                    None => aggregate(&self.agg)?.input().schema(),
                };
                let Some(rows) = replay.take_on_host(Arc::clone(&input_schema)) else { return Err(failed) };
                timeline::mark(&self.who, || format!("on the CPU after: {failed}"));
                log::debug!("GPU aggregate partition {} finishes on the CPU: {failed}", self.partition);
                self.metrics.cpu_fallbacks.add(1);
                return cpu_output(self.on_cpu(input_schema, rows)?).await.map(Reduced::Host);
            }
        };
        let schema = input.schema();
        let (mut head, mut rows) = (Vec::new(), 0usize);
        if self.min_rows > 0 {
            // DataFusion's aggregate starts on the rows as they arrive, as it would without this
            // exec, so that when the input ends under `gpu.min_rows` its work has overlapped the
            // input's (the operators below produce it over time). When the input reaches
            // `gpu.min_rows`, that speculative aggregate is aborted and the rows go to the GPU.
            let (tx, rx) = futures::channel::mpsc::unbounded::<Result<RecordBatch>>();
            let cpu =
                self.on_cpu(Arc::clone(&schema), Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&schema), rx)))?;
            while rows < self.min_rows {
                match input.next().await.transpose()? {
                    Some(b) => {
                        rows += b.num_rows();
                        // The aggregate may have failed already: its error comes from `join`.
                        let _ = tx.unbounded_send(Ok(b.clone()));
                        head.push(b);
                    }
                    None => {
                        drop(tx);
                        timeline::mark(&self.who, || format!("{rows} input rows, below gpu.min_rows: on the CPU"));
                        self.metrics.cpu_partitions.add(1);
                        self.metrics.input_rows.add(rows);
                        return cpu_output(cpu).await.map(Reduced::Host);
                    }
                }
            }
            // Dropping the task aborts it before it sees the end of its input.
            drop(cpu);
            drop(tx);
        }
        let rest = futures::stream::iter(head.into_iter().map(Ok)).chain(input);
        let input: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&schema), rest));
        if !self.cpu_fallback {
            return self.reduce(self.host_pieces(input)).await.map(Reduced::Device);
        }
        let name = format!("GpuAggregateExec[{}] input kept for the CPU", self.partition);
        let (replay, input) = Replay::new(input, self.context.memory_pool(), name);
        let failed = match self.reduce(self.host_pieces(input)).await {
            Ok(state) => return Ok(Reduced::Device(state)),
            // An error of the input (a GPU join below out of memory, say) is not this exec's.
            Err(e) if recoverable_on_cpu(&e) && !replay.input_failed() => e,
            Err(e) => return Err(e),
        };
        // The GPU's work (and the stream that read the input) is dropped by now: the device
        // memory it held is free, and the partition's whole input goes to DataFusion's aggregate.
        let Some(rows) = replay.take() else {
            return Err(failed.context(
                "a GPU aggregate ran out of device memory, and its input could not be kept for the CPU \
                 within DataFusion's memory pool",
            ));
        };
        timeline::mark(&self.who, || format!("on the CPU after: {failed}"));
        log::debug!("GPU aggregate partition {} finishes on the CPU: {failed}", self.partition);
        self.metrics.cpu_fallbacks.add(1);
        cpu_output(self.on_cpu(schema, rows)?).await.map(Reduced::Host)
    }

    /// DataFusion's aggregate (and the nodes fused into this exec) over `rows`, this
    /// partition's input, started as a task of its own; dropping the task aborts it.
    fn on_cpu(
        &self,
        schema: SchemaRef,
        rows: SendableRecordBatchStream,
    ) -> Result<SpawnedTask<Result<Vec<RecordBatch>>>> {
        let source = Arc::new(HandedStream::new(Arc::clone(&schema), rows));
        let mut node: Arc<dyn ExecutionPlan> =
            Arc::new(StreamingTableExec::try_new(schema, vec![source], None, Vec::new(), false, None)?);
        let recompute = || ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        if let Some(f) = &self.fused {
            // The chain lists the nodes nearest this exec first.
            for c in f.chain.iter().rev() {
                node = Arc::clone(c).replace_children(vec![node], recompute())?;
            }
        }
        let agg = Arc::clone(&self.agg).replace_children(vec![node], recompute())?;
        let context = Arc::clone(&self.context);
        Ok(SpawnedTask::spawn(async move { datafusion::physical_plan::collect(agg, context).await }))
    }

    /// The fused input's batches projected to the columns its kernels read, through a host
    /// pre-filter when the fusion has one (see [`fuse::prefiltered`]).
    fn prefiltered(
        &self,
        input: SendableRecordBatchStream,
        fused: Arc<FusedInput>,
    ) -> impl Stream<Item = Result<RecordBatch>> + Send + use<> {
        let pre = fuse::host_prefilter(&fused, self.host_filter_below, self.host_upload_ns_per_row);
        let counters = PrefilterCounters {
            rows: self.metrics.input_rows.clone(),
            dropped: self.metrics.host_filtered_rows.clone(),
            filtering: self.metrics.host_filter_partitions.clone(),
        };
        fuse::prefiltered(input, fused, Arc::clone(&self.filtered_on_host), pre, counters, self.who.clone())
    }

    /// `input`'s batches projected to what this aggregate uploads, on the device in chunks of
    /// about `gpu.batch_rows` rows (uploaded as they arrive, see [`ChunkUploader`]).
    fn host_pieces(
        &self,
        input: SendableRecordBatchStream,
    ) -> impl Stream<Item = Result<Piece>> + Send + Unpin + use<> {
        let projected: Pin<Box<dyn Stream<Item = Result<RecordBatch>> + Send>> = match self.fused.clone() {
            None => {
                let (layout, rows) = (Arc::clone(&self.layout), self.metrics.input_rows.clone());
                Box::pin(input.map(move |b| {
                    let b = b?;
                    rows.add(b.num_rows());
                    layout.project(&b)
                }))
            }
            Some(fused) => Box::pin(self.prefiltered(input, fused)),
        };
        let uploader = ChunkUploader::new(
            Arc::clone(&self.gpu),
            self.chunk_rows,
            self.metrics.upload_time.clone(),
            self.metrics.pack_time.clone(),
        );
        Box::pin(uploader.chunks(projected).map(|c| c.map(Piece::Device)))
    }

    /// Reduces `input` to one state batch on the device: pieces are gathered into chunks of about
    /// `gpu.batch_rows` rows, each chunk grouped to a state, and the states merged whenever they
    /// add up to a chunk (or, once merging stops shrinking them, to twice the last merge), and
    /// once more at the end.
    async fn reduce(&self, mut input: impl Stream<Item = Result<Piece>> + Unpin) -> Result<DeviceBatch> {
        let mut pending: Vec<Piece> = Vec::new();
        let mut pending_rows = 0usize;
        let mut parts: Vec<DeviceBatch> = Vec::new();
        let mut parts_rows = 0usize;
        let mut merge_at = self.chunk_rows;
        loop {
            let next = input.next().await.transpose()?;
            let done = next.is_none();
            if let Some(piece) = next {
                pending_rows += piece.num_rows();
                pending.push(piece);
            }
            if pending_rows > 0 && (pending_rows >= self.chunk_rows || done) {
                timeline::mark(&self.who, || format!("chunk of {pending_rows} rows arrived"));
                pending_rows = 0;
                self.metrics.chunks.add(1);
                let state = self.group_by(std::mem::take(&mut pending), true).await?;
                self.grouped.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                timeline::mark(&self.who, || format!("chunk grouped: {} state rows", state.num_rows()));
                parts_rows += state.num_rows();
                parts.push(state);
                if parts.len() > 1 && parts_rows >= merge_at {
                    let merged = self.merge(std::mem::take(&mut parts)).await?;
                    timeline::mark(&self.who, || format!("states merged: {} rows", merged.num_rows()));
                    parts_rows = merged.num_rows();
                    // States that hardly shrink (many groups) are merged again only once as
                    // many rows have joined them, so each row is merged a bounded number of times.
                    merge_at = self.chunk_rows.max(2 * parts_rows);
                    parts.push(merged);
                }
            }
            if done {
                break;
            }
        }
        // No input at all still makes a state (one row without group keys), and several parts merge.
        if parts.len() == 1 {
            parts.pop().ok_or_else(|| DataFusionError::Internal("a GPU aggregate lost its state".into()))
        } else if parts.is_empty() {
            let schema = match &self.input_fusion() {
                Some(f) => Arc::clone(&f.projection.upload_schema),
                None => Arc::clone(&self.layout.upload_schema),
            };
            self.group_by(vec![Piece::Host(RecordBatch::new_empty(schema))], true).await
        } else {
            self.merge(parts).await
        }
    }

    /// The output batches from the merged state (downloaded once).
    async fn finish(&self, state: DeviceBatch) -> Result<Vec<RecordBatch>> {
        let mut parts = self.finish_split(state, None, 1).await?;
        parts.pop().ok_or_else(|| DataFusionError::Internal("a GPU aggregate lost its output".into()))
    }

    /// The output batches from the merged state (downloaded once), finalised by `threads` host
    /// tasks over row ranges and, with `hash`, split into its partitions by DataFusion's hash
    /// partitioner (as the exchange the device merge replaced would have split them).
    async fn finish_split(
        &self,
        state: DeviceBatch,
        hash: Option<(Vec<Arc<dyn PhysicalExpr>>, usize)>,
        threads: usize,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        timeline::mark(&self.who, || format!("final state of {} rows ready", state.num_rows()));
        let timer = self.metrics.download_time.clone();
        let state = blocking(move || {
            let _t = timer.timer();
            state.download()
        })
        .await?;
        timeline::mark(&self.who, || "final state downloaded".into());
        let rows = state.num_rows();
        self.metrics.output_rows.add(rows);
        let batch_size = self.batch_size;
        // Row ranges of whole batches, one per task.
        let per_task = rows.div_ceil(threads.max(1)).div_ceil(batch_size).max(1) * batch_size;
        // An empty state still makes one (empty) output batch.
        let ranges: Vec<(usize, usize)> = if rows == 0 {
            vec![(0, 0)]
        } else {
            (0..rows).step_by(per_task).map(|start| (start, per_task.min(rows - start))).collect()
        };
        let mut tasks = Vec::with_capacity(ranges.len());
        for (start, len) in ranges {
            let (slice, agg, layout) = (state.slice(start, len), Arc::clone(&self.agg), Arc::clone(&self.layout));
            let (hash, timer) = (hash.clone(), self.metrics.partition_time.clone());
            tasks.push(SpawnedTask::spawn_blocking(move || -> Result<Vec<Vec<RecordBatch>>> {
                let out = output(&agg, &layout, slice)?;
                let mut batches = Vec::new();
                let mut offset = 0;
                while offset < out.num_rows() {
                    let len = batch_size.min(out.num_rows() - offset);
                    batches.push(out.slice(offset, len));
                    offset += len;
                }
                if batches.is_empty() {
                    batches.push(out);
                }
                let Some((exprs, n)) = hash else { return Ok(vec![batches]) };
                let mut parts = vec![Vec::new(); n];
                let mut partitioner = BatchPartitioner::new_hash_partitioner(exprs, n, timer)?;
                for b in batches {
                    for part in partitioner.partition_iter(b)? {
                        let (p, b) = part?;
                        parts[p].push(b);
                    }
                }
                Ok(parts)
            }));
        }
        let mut out: Vec<Vec<RecordBatch>> = Vec::new();
        for t in tasks {
            let parts =
                t.await.map_err(|e| DataFusionError::Execution(format!("a GPU aggregate's output task: {e}")))??;
            if out.is_empty() {
                out = parts;
            } else {
                for (o, p) in out.iter_mut().zip(parts) {
                    o.extend(p);
                }
            }
        }
        Ok(out)
    }

    /// The fused kernels input rows run through: without the host's filter once it filters every row.
    fn input_fusion(&self) -> Option<Arc<FusedInput>> {
        self.filtered_on_host.get().cloned().or_else(|| self.fused.clone())
    }

    /// Merges state batches into one.
    async fn merge(&self, parts: Vec<DeviceBatch>) -> Result<DeviceBatch> {
        self.metrics.merges.add(1);
        self.group_by(parts.into_iter().map(Piece::Device).collect(), false).await
    }

    /// Groups `pieces` (all host or all device) into a state batch on the device: a chunk of
    /// input rows (`input`: host ones through the fused filters and projections first) or of states.
    async fn group_by(&self, pieces: Vec<Piece>, input: bool) -> Result<DeviceBatch> {
        let opts = *self.opts.lock().map_err(|_| DataFusionError::Internal("a GPU aggregate's options lock".into()))?;
        let (gpu, layout, m) = (Arc::clone(&self.gpu), Arc::clone(&self.layout), self.metrics.clone());
        let in_rows: usize = pieces.iter().map(Piece::num_rows).sum();
        let fused = if input { self.input_fusion() } else { None };
        let (mut host, mut device) = (Vec::new(), Vec::new());
        for p in pieces {
            match p {
                Piece::Host(b) => host.push(b),
                Piece::Device(b) => device.push(b),
            }
        }
        if !host.is_empty() && !device.is_empty() {
            return Err(DataFusionError::Internal("a GPU aggregate chunk mixes host and device rows".into()));
        }
        let host = match host.first() {
            Some(b) => Some(concat_batches(&b.schema(), &host)?),
            None => None,
        };
        let state = blocking(move || {
            // Device rows may still be arriving on their stream (an upload): work follows them there.
            let stream = match device.first() {
                Some(d) => Arc::clone(d.stream()),
                None => gpu.stream(),
            };
            let (cols, rows) = match host {
                Some(host) => {
                    let _t = m.upload_time.timer();
                    let dev = DeviceBatch::upload(&gpu, &stream, &host)?;
                    (dev.columns().to_vec(), dev.num_rows() as u64)
                }
                None => {
                    let schema = device
                        .first()
                        .map(|b| Arc::clone(b.schema()))
                        .ok_or_else(|| DataFusionError::Internal("a GPU aggregate grouped an empty chunk".into()))?;
                    let _t = m.concat_time.timer();
                    let b = DeviceBatch::concat(&gpu, &stream, schema, &device)?;
                    (b.columns().to_vec(), b.num_rows() as u64)
                }
            };
            let (cols, rows) = match &fused {
                Some(f) => {
                    let _t = m.project_time.timer();
                    f.projection.evaluate(&gpu, &stream, &cols, rows)?
                }
                None => (cols, rows),
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
                Arc::clone(&stream),
            )?;
            // The state is complete before the inputs are freed and before another stream reads it.
            stream.synchronize().map_err(|e| gpu_error(format!("synchronising a GPU aggregate: {e}")))?;
            drop((cols, device));
            Ok(state)
        })
        .await?;
        if input && in_rows > 0 {
            self.choose_again(in_rows as u64, state.num_rows() as u64)?;
        }
        Ok(state)
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
}

/// The output of DataFusion's aggregate started by [`Run::on_cpu`].
async fn cpu_output(task: SpawnedTask<Result<Vec<RecordBatch>>>) -> Result<Vec<RecordBatch>> {
    task.join_unwind()
        .await
        .map_err(|e| DataFusionError::Execution(format!("GPU aggregate: its CPU aggregate failed: {e}")))?
}

/// DataFusion's partial states of each partition of a GPU Partial stage, on the host (device
/// states downloaded), as a GPU Partial stage under a CPU Final gives them.
async fn states_on_host(partial: &GpuAggregateExec, run: &Run, reduced: Vec<Reduced>) -> Result<Vec<Vec<RecordBatch>>> {
    let mut parts = Vec::with_capacity(reduced.len());
    for r in reduced {
        parts.push(match r {
            Reduced::Host(states) => states,
            Reduced::Device(state) => {
                let (agg, layout) = (Arc::clone(&partial.agg), Arc::clone(&partial.layout));
                let timer = run.metrics.download_time.clone();
                blocking(move || {
                    let _t = timer.timer();
                    Ok(vec![output(&agg, &layout, state.download()?)?])
                })
                .await?
            }
        });
    }
    Ok(parts)
}

/// An aggregate's output rows from (a slice of) its merged state batch.
fn output(agg: &Arc<dyn ExecutionPlan>, layout: &AggregateLayout, state: RecordBatch) -> Result<RecordBatch> {
    let a = aggregate(agg)?;
    let schema: SchemaRef = a.schema();
    if !layout.final_output {
        return Ok(RecordBatch::try_new(schema, state.columns().to_vec())?);
    }
    let n = state.num_rows();
    let mut columns: Vec<ArrayRef> = state.columns()[..layout.groups].to_vec();
    for f in &layout.finalize {
        columns.push(match f {
            Finalize::State(p) => Arc::clone(state.column(*p)),
            Finalize::ListLength(p) => {
                let lists = state.column(*p).as_list_opt::<i32>().ok_or_else(|| {
                    DataFusionError::Internal(format!("COUNT(DISTINCT)'s state is {}", state.column(*p).data_type()))
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

/// The batches of a stream of batch lists (or its error).
fn flatten_batches(
    lists: impl Stream<Item = Result<Vec<RecordBatch>>> + Send + 'static,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
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
