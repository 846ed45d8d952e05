//! One partition of a GPU aggregate: its input reduced chunk by chunk to device states, merged,
//! and finalised on the host; a small or failing input goes to DataFusion's own aggregate.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::repartition::BatchPartitioner;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, PhysicalExpr};
use futures::{Stream, StreamExt};

use super::{GpuAggregateExec, Metrics, aggregate};
use crate::aggregate::layout::{AggregateLayout, Finalize};
use crate::aggregate::{AggregateAlgorithmSetting, GroupByOptions, GroupByTimes, group_by};
use crate::columns::{DeviceBatch, DeviceColumn};
use crate::config::GpuConfig;
use crate::cost::aggregate::AggregateEstimate;
use crate::device::Gpu;
use crate::error::{gpu_error, recoverable_on_cpu};
use crate::exec::fuse::{self, FusedInput, PrefilterCounters};
use crate::exec::replay::{DeviceReplay, HandedStream, Replay};
use crate::exec::upload::ChunkUploader;
use crate::exec::{
    DeviceBatchStream, GpuExec, as_gpu_exec, blocking, onto, partition_gpu, rows_within_limit, timeline,
};

impl GpuAggregateExec {
    /// The input stream of `partition` (through the fused input when there is one); device
    /// batches come to `gpu`, the device its run works on.
    pub(super) fn execute_input(&self, partition: usize, context: &Arc<TaskContext>, gpu: &Arc<Gpu>) -> Result<Input> {
        if let Some(DeviceInput { exec, columns, schema }) = self.device_input()? {
            let batches = onto(exec.execute_device(partition, Arc::clone(context))?, gpu);
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
    pub(super) fn device_input(&self) -> Result<Option<DeviceInput<'_>>> {
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
    pub(super) fn new_run(&self, partition: usize, context: &Arc<TaskContext>) -> Result<Run> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = partition_gpu(&cfg, context, partition)?;
        // Under `auto` the plan's group count is often DataFusion's fallback (the input's rows,
        // without distinct counts): the first chunk runs the hash group-by, and the cost model
        // chooses again for the next chunks and merges from the group count it found.
        let adaptive = match (&self.estimate, self.setting) {
            (Some(e), AggregateAlgorithmSetting::Auto) => Some(Arc::clone(e)),
            _ => None,
        };
        let host_upload_ns_per_row = self.fused.as_deref().and_then(|f| f.upload_ns_per_row);
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
}

/// One partition's execution.
pub(super) struct Run {
    pub(super) gpu: Arc<Gpu>,
    pub(super) fused: Option<Arc<FusedInput>>,
    /// The fused kernels without the filter the host applies to every row of this partition,
    /// once it has chosen to (see [`Run::prefiltered`]).
    pub(super) filtered_on_host: Arc<OnceLock<Arc<FusedInput>>>,
    pub(super) layout: Arc<AggregateLayout>,
    pub(super) agg: Arc<dyn ExecutionPlan>,
    /// How the next group-by runs (changed by the run-time choice).
    pub(super) opts: std::sync::Mutex<GroupByOptions>,
    /// Under `auto`: the plan's estimate, through which the run chooses again on observed groups.
    pub(super) adaptive: Option<Arc<AggregateEstimate>>,
    pub(super) chunk_rows: usize,
    pub(super) batch_size: usize,
    /// A partition whose whole input has fewer rows runs on the CPU (`gpu.cost.min_rows`).
    pub(super) min_rows: usize,
    /// `gpu.memory.cpu_fallback`: finish on the CPU when device memory runs out.
    pub(super) cpu_fallback: bool,
    /// Chunks of input rows grouped so far (a device input is kept for the CPU until the first).
    pub(super) grouped: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) partition: usize,
    /// `gpu.fuse.host_filter_below`: see [`fuse::HostPrefilter`].
    pub(super) host_filter_below: f64,
    /// With `gpu.fuse.host_filter_priced`: what uploading one row of the fused input costs this
    /// partition, in nanoseconds (see [`crate::exec::fuse::priced_mode`]).
    pub(super) host_upload_ns_per_row: Option<f64>,
    pub(super) context: Arc<TaskContext>,
    pub(super) metrics: Metrics,
    /// The name of this run in the debug timeline (empty when the timeline is off).
    pub(super) who: String,
}

/// The GPU exec an aggregate reads on the device, the columns of its output the aggregate
/// groups, and their schema (see [`GpuAggregateExec::device_input`]).
pub(super) struct DeviceInput<'a> {
    pub(super) exec: &'a dyn GpuExec,
    pub(super) columns: Vec<usize>,
    pub(super) schema: SchemaRef,
}

/// A partition's input: host batches, or the device batches of a GPU exec below (with the
/// columns of them this aggregate reads, and their schema).
pub(super) enum Input {
    Host(SendableRecordBatchStream),
    Device { batches: DeviceBatchStream, columns: Vec<usize>, schema: SchemaRef },
}

/// A partition's input reduced on the device (the state) or on the CPU (DataFusion's output).
/// A clone shares the device state's memory.
#[derive(Clone)]
pub(super) enum Reduced {
    Device(DeviceBatch),
    Host(Vec<RecordBatch>),
}

/// Rows a [`Run`] reduces: host rows (projected to what the aggregate uploads) or device rows
/// (already in the order the aggregate reads them).
pub(super) enum Piece {
    Host(RecordBatch),
    Device(DeviceBatch),
}

impl Piece {
    pub(super) fn num_rows(&self) -> usize {
        match self {
            Piece::Host(b) => b.num_rows(),
            Piece::Device(b) => b.num_rows(),
        }
    }
}

impl Run {
    /// This partition's output batches from its host input. The first `gpu.cost.min_rows` rows are
    /// read before anything is uploaded: when the input ends sooner, the plan's estimate was
    /// too high (sizes after joins and filters are guesses) and DataFusion's aggregate, with the
    /// filters and projections fused into this one, gives the output on the CPU: a GPU group-by
    /// has a fixed cost of transfers, launches and synchronisations that so few rows do not
    /// repay. That CPU aggregate reads the rows as they arrive (see [`Run::reduce_or_cpu`]).
    pub(super) async fn run(self, input: Input) -> Result<Vec<RecordBatch>> {
        match self.reduce_or_cpu(input).await? {
            Reduced::Device(state) => self.finish(state).await,
            Reduced::Host(out) => {
                self.metrics.output_rows.add(out.iter().map(|b| b.num_rows()).sum());
                Ok(out)
            }
        }
    }

    /// This partition's output for a GPU parent, as [`Run::run`] makes it for a CPU one: the
    /// state's `columns` (the output, see [`AggregateLayout::device_output`]) on the device, or
    /// DataFusion's output on the host when the partition ran on the CPU.
    pub(super) async fn run_for_device(self, input: Input, columns: &[usize], schema: &SchemaRef) -> Result<Reduced> {
        match self.reduce_or_cpu(input).await? {
            Reduced::Device(state) => self.hand_over(state, columns, schema).map(Reduced::Device),
            Reduced::Host(out) => {
                self.metrics.output_rows.add(out.iter().map(|b| b.num_rows()).sum());
                Ok(Reduced::Host(out))
            }
        }
    }

    /// The merged `state`'s output `columns` (with the output's `schema`), handed to a GPU parent
    /// on the device instead of downloaded ([`Run::finish`]).
    pub(super) fn hand_over(&self, state: DeviceBatch, columns: &[usize], schema: &SchemaRef) -> Result<DeviceBatch> {
        timeline::mark(&self.who, || format!("final state of {} rows handed over on the device", state.num_rows()));
        self.metrics.output_rows.add(state.num_rows());
        state.select(columns, schema)
    }

    /// `input` reduced to a state on the device, or, for fewer than `gpu.cost.min_rows` rows,
    /// DataFusion's output on the host (see [`Run::run`]).
    pub(super) async fn reduce_or_cpu(&self, input: Input) -> Result<Reduced> {
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
            // exec, so that when the input ends under `gpu.cost.min_rows` its work has overlapped the
            // input's (the operators below produce it over time). When the input reaches
            // `gpu.cost.min_rows`, that speculative aggregate is aborted and the rows go to the GPU.
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
                        timeline::mark(&self.who, || format!("{rows} input rows, below gpu.cost.min_rows: on the CPU"));
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
    pub(super) fn on_cpu(
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
    pub(super) fn prefiltered(
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
    pub(super) fn host_pieces(
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
    pub(super) async fn reduce(&self, mut input: impl Stream<Item = Result<Piece>> + Unpin) -> Result<DeviceBatch> {
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
    pub(super) async fn finish(&self, state: DeviceBatch) -> Result<Vec<RecordBatch>> {
        let mut parts = self.finish_split(state, None, 1).await?;
        parts.pop().ok_or_else(|| DataFusionError::Internal("a GPU aggregate lost its output".into()))
    }

    /// The output batches from the merged state (downloaded once), finalised by `threads` host
    /// tasks over row ranges and, with `hash`, split into its partitions by DataFusion's hash
    /// partitioner (as the exchange the device merge replaced would have split them).
    pub(super) async fn finish_split(
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
    pub(super) fn input_fusion(&self) -> Option<Arc<FusedInput>> {
        self.filtered_on_host.get().cloned().or_else(|| self.fused.clone())
    }

    /// Merges state batches into one.
    pub(super) async fn merge(&self, parts: Vec<DeviceBatch>) -> Result<DeviceBatch> {
        self.metrics.merges.add(1);
        self.group_by(parts.into_iter().map(Piece::Device).collect(), false).await
    }

    /// Groups `pieces` (all host or all device) into a state batch on the device: a chunk of
    /// input rows (`input`: host ones through the fused filters and projections first) or of states.
    pub(super) async fn group_by(&self, pieces: Vec<Piece>, input: bool) -> Result<DeviceBatch> {
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
                    // An empty input's state is made from an empty batch: no rows to upload.
                    let _t = (host.num_rows() > 0).then(|| m.upload_time.timer());
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
    pub(super) fn choose_again(&self, rows: u64, groups: u64) -> Result<()> {
        let Some(estimate) = &self.adaptive else { return Ok(()) };
        let best = estimate.choose_for_observed(rows, groups);
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
pub(super) async fn cpu_output(task: SpawnedTask<Result<Vec<RecordBatch>>>) -> Result<Vec<RecordBatch>> {
    task.join_unwind()
        .await
        .map_err(|e| DataFusionError::Execution(format!("GPU aggregate: its CPU aggregate failed: {e}")))?
}

/// An aggregate's output rows from (a slice of) its merged state batch.
pub(super) fn output(
    agg: &Arc<dyn ExecutionPlan>,
    layout: &AggregateLayout,
    state: RecordBatch,
) -> Result<RecordBatch> {
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
