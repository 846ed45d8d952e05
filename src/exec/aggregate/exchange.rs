//! The device exchange between a GPU Partial aggregate and the Final above it: the exchange
//! DataFusion planned between them removed when the plan allows, every partial partition's
//! state merged on the device, and the output split by the exchange's hash on the host.

use datafusion::common::{not_impl_datafusion_err, not_impl_err};
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, Partitioning, PhysicalExpr, displayable,
};
use futures::StreamExt;

use super::run::{Piece, Reduced, Run, output};
use super::{GpuAggregateExec, Metrics, aggregate};
use crate::columns::DeviceBatch;
use crate::error::recoverable_on_cpu;
use crate::exec::once::OnceShared;
use crate::exec::{blocking, timeline};

/// A Final aggregate's partial stage on the same GPU, the exchange between them (DataFusion's
/// `RepartitionExec` or `CoalescePartitionsExec`) removed: every partial partition's state stays
/// on the device and the Final merges them there, so no state crosses PCIe. One GPU does all the
/// work, so the exchange's hashing adds nothing; the Final's output keeps the partitioning its
/// parents were planned for, split on the host by DataFusion's own hash partitioner.
#[derive(Debug)]
pub(super) struct Exchange {
    pub(super) partial: Arc<GpuAggregateExec>,
    /// The removed exchange, for EXPLAIN.
    pub(super) removed: String,
    /// Position in the partial's state of each column the Final reads, in its upload order.
    pub(super) columns: Vec<usize>,
    /// The exchange's hash partitioning, over the group columns (which the Final's output holds
    /// at the same positions); `None` for one output partition.
    pub(super) hash: Option<(Vec<Arc<dyn PhysicalExpr>>, usize)>,
    /// The output of every partition, made once.
    pub(super) output: OnceShared<Arc<Vec<Vec<RecordBatch>>>>,
    /// The output of every partition for a GPU parent, made once; each partition takes its own.
    pub(super) device_output: OnceShared<Arc<Vec<DevicePart>>>,
}

/// One output partition of a device exchange for a GPU parent, until that partition takes it:
/// the merged state's output columns on the device, or host batches (the CPU merged them, or the
/// output follows the exchange's hash) that the partition uploads.
pub(super) type DevicePart = std::sync::Mutex<Option<Reduced>>;

/// A device exchange's merged states: the Final's state on the device (with the run that merged
/// it), or, when DataFusion merged them on the CPU, its output partitions.
enum Merged {
    Device(Box<Run>, DeviceBatch),
    Host(Vec<Vec<RecordBatch>>),
}

/// Why [`GpuAggregateExec::with_exchange`] removes no exchange.
pub(super) enum ExchangeKept {
    /// The plan has none that can go (why is not shown).
    Plan,
    /// One could go, but this one is better kept (shown in EXPLAIN).
    Choice(String),
}

impl Exchange {
    /// The partitions of the partial stage's input, each reduced by its own task.
    fn input_partitions(&self) -> usize {
        self.partial.children().first().map_or(1, |c| c.output_partitioning().partition_count())
    }

    /// The same exchange over a new partial stage, with its output not yet made.
    pub(super) fn with_partial(&self, partial: Arc<GpuAggregateExec>) -> Exchange {
        Exchange {
            partial,
            removed: self.removed.clone(),
            columns: self.columns.clone(),
            hash: self.hash.clone(),
            output: OnceShared::default(),
            device_output: OnceShared::default(),
        }
    }
}

/// The GPU partial stage that `a`, a final aggregate stage, reads through its exchange, with the
/// exchange's hash partitioning (`None` for a coalesce), when the plan has the shape a device
/// exchange replaces: a hash repartition that keeps no order and the final stage's partition
/// count, or a coalesce without a fetch into one partition, over a GPU aggregate in Partial mode.
/// Why not, otherwise. (The rule's `gpu.cost.resident_inputs` asks the same of a final stage
/// before placing it; the exchange itself checks the columns too.)
pub fn gpu_partial_below_exchange(
    a: &AggregateExec,
) -> crate::error::Result<(&GpuAggregateExec, Option<(Vec<Arc<dyn PhysicalExpr>>, usize)>)> {
    if !matches!(a.mode(), AggregateMode::Final | AggregateMode::FinalPartitioned) {
        return not_impl_err!("a {:?} aggregate has no partial stage", a.mode());
    }
    let exchange = a.input();
    let out_partitions = a.properties().output_partitioning().partition_count();
    let (below, hash) = if let Some(r) = exchange.downcast_ref::<RepartitionExec>() {
        let Partitioning::Hash(exprs, n) = r.partitioning() else {
            return not_impl_err!("the exchange below is a {} repartition", r.partitioning());
        };
        if r.preserve_order() || *n != out_partitions {
            return not_impl_err!("the repartition below keeps an order or changes the partition count");
        }
        (r.input(), Some((exprs.clone(), *n)))
    } else if let Some(c) = exchange.downcast_ref::<CoalescePartitionsExec>() {
        if c.fetch().is_some() || out_partitions != 1 {
            return not_impl_err!("the coalesce below has a fetch");
        }
        (c.input(), None)
    } else {
        return not_impl_err!("its input is a {}, not an exchange", exchange.name());
    };
    let partial = below
        .downcast_ref::<GpuAggregateExec>()
        .ok_or_else(|| not_impl_datafusion_err!("the exchange's input is a {}, not a GPU aggregate", below.name()))?;
    let p = aggregate(&partial.agg)?;
    if p.mode() != &AggregateMode::Partial || partial.layout.final_output {
        return not_impl_err!("the aggregate below the exchange is {:?}", p.mode());
    }
    Ok((partial, hash))
}

impl GpuAggregateExec {
    /// The exchange [`Self::with_exchange`] removes, or why there is none.
    pub(super) fn exchange_below(&self, host_input: bool) -> std::result::Result<Exchange, ExchangeKept> {
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
    pub(super) fn unsized_host_input(&self) -> Option<String> {
        if self.device_input().ok().flatten().is_some() {
            return None;
        }
        let node = match &self.fused {
            Some(f) => &f.input,
            None => aggregate(&self.agg).ok()?.input(),
        };
        if crate::exec::statistics::exact_rows(node).is_some() {
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
             CPU (gpu.experimental.aggregate_exchange_host_input)"
        ))
    }

    /// The exchange [`Self::with_exchange`] may remove, or why the plan allows none.
    pub(super) fn device_exchange(&self) -> crate::error::Result<Exchange> {
        if self.fused.is_some() {
            return not_impl_err!("its input is fused");
        }
        let a = aggregate(&self.agg)?;
        let (partial, hash) = gpu_partial_below_exchange(a)?;
        let exchange = a.input();
        // The Final reads plain columns of the partial's state, group columns in place.
        let state = &partial.layout.state_schema;
        let mut columns = Vec::with_capacity(self.layout.upload.len());
        for (i, (e, f)) in self.layout.upload.iter().zip(self.layout.upload_schema.fields()).enumerate() {
            let c = e
                .downcast_ref::<Column>()
                .ok_or_else(|| not_impl_datafusion_err!("the Final reads `{e}`, not a column"))?;
            let want = state.fields().get(c.index()).map(|s| s.data_type());
            if want != Some(f.data_type()) || (i < self.layout.groups && c.index() != i) {
                return not_impl_err!("the Final's column `{e}` does not match the partial state");
            }
            columns.push(c.index());
        }
        if let Some((exprs, _)) = &hash {
            for e in exprs {
                match e.downcast_ref::<Column>() {
                    Some(c) if c.index() < self.layout.groups => {}
                    _ => return not_impl_err!("the exchange hashes `{e}`, not a group column"),
                }
            }
        }
        Ok(Exchange {
            partial: Arc::new(partial.duplicate(ExecutionPlanMetricsSet::new())),
            removed: displayable(exchange.as_ref()).one_line().to_string().trim_end().to_string(),
            columns,
            hash,
            output: OnceShared::default(),
            device_output: OnceShared::default(),
        })
    }

    /// The output of every partition of a Final aggregate with its partial stage on the device
    /// (see [`Self::exchange_merge`]), split by the exchange's hash on the host.
    pub(super) async fn exchange_output(
        &self,
        ex: &Exchange,
        context: Arc<TaskContext>,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        match self.exchange_merge(ex, &context).await? {
            Merged::Host(parts) => Ok(parts),
            Merged::Device(run, state) => {
                // The host work the exchange's partitions did in parallel (finalising, hashing)
                // is spread over as many tasks.
                let threads = ex.hash.as_ref().map_or(1, |(_, n)| *n).max(ex.input_partitions());
                run.finish_split(state, ex.hash.clone(), threads).await
            }
        }
    }

    /// The output partitions of a Final aggregate with its partial stage on the device, for a
    /// GPU parent that reads them on the device. The merged state's `columns` (the output, see
    /// [`crate::aggregate::layout::AggregateLayout::device_output`]) stay on the device, all in
    /// the first partition, unless `hash_split`: then the output follows the exchange's hash
    /// partitioning, which only DataFusion's partitioner on the host gives. A group is one row
    /// of the merged state, so each group is in one partition either way; what the hash adds is
    /// the same partition as the same key of another input that a parent pairs with this one
    /// (the rule asks for it then, see [`GpuAggregateExec::with_hash_split`]).
    pub(super) async fn exchange_device_output(
        &self,
        ex: &Exchange,
        columns: Vec<usize>,
        context: Arc<TaskContext>,
    ) -> Result<Vec<DevicePart>> {
        let partitions = self.agg.output_partitioning().partition_count().max(1);
        let part = |r: Reduced| std::sync::Mutex::new(Some(r));
        if self.hash_split && ex.hash.is_some() {
            let parts = self.exchange_output(ex, context).await?;
            return Ok(parts.into_iter().map(|p| part(Reduced::Host(p))).collect());
        }
        match self.exchange_merge(ex, &context).await? {
            Merged::Host(parts) => Ok(parts.into_iter().map(|p| part(Reduced::Host(p))).collect()),
            Merged::Device(run, state) => {
                let output = run.hand_over(state, &columns, &self.agg.schema())?;
                let mut out = vec![part(Reduced::Device(output))];
                out.extend((1..partitions).map(|_| part(Reduced::Host(Vec::new()))));
                Ok(out)
            }
        }
    }

    /// Every input partition of the partial stage reduced to a device state by its own task, and
    /// the states merged by the Final as they come (or by DataFusion on the CPU, see below).
    async fn exchange_merge(&self, ex: &Exchange, context: &Arc<TaskContext>) -> Result<Merged> {
        let partial = &ex.partial;
        let inputs = ex.input_partitions();
        let mut tasks = futures::stream::FuturesUnordered::new();
        for i in 0..inputs {
            let mut run = partial.new_run(i, context)?;
            // One exec does both stages: the partial's work shows in this exec's metrics.
            run.metrics = Metrics::new(&self.metrics, i);
            let input = partial.execute_input(i, context, &run.gpu)?;
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
        let run = self.new_run(0, context)?;
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
            return self.exchange_on_cpu(&run, parts, context).await.map(Merged::Host);
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
                    Reduced::Device(state) if state.gpu().same_device(&gpu) => state,
                    // A partial partition spread to another device of the set (see
                    // `gpu.devices_spread_partitions`): its state comes to the merge's device.
                    Reduced::Device(state) => blocking(move || state.to_device(&gpu)).await?,
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
                return self.exchange_on_cpu(&run, parts, context).await.map(Merged::Host);
            }
            (Err(e), _) => return Err(e),
        };
        Ok(Merged::Device(Box::new(run), state))
    }

    /// The removed exchange and this Final aggregate, DataFusion's own, over the partial states
    /// of every input partition on the host (`parts`, one entry per input partition): the
    /// output partitions the exchange and the Final would have made.
    pub(super) async fn exchange_on_cpu(
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

/// DataFusion's partial states of each partition of a GPU Partial stage, on the host (device
/// states downloaded), as a GPU Partial stage under a CPU Final gives them.
pub(super) async fn states_on_host(
    partial: &GpuAggregateExec,
    run: &Run,
    reduced: Vec<Reduced>,
) -> Result<Vec<Vec<RecordBatch>>> {
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
