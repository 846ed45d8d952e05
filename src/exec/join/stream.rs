//! One partition of a GPU join as a stream: a task builds (or waits for the shared build), then
//! probes chunk by chunk, sending output windows through a bounded channel, and finishes on
//! DataFusion's join when device memory runs out.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Instant;

use cudarc::driver::CudaStream;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::joins::PartitionMode;
use datafusion::physical_plan::metrics::Time;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};

use super::build::{BuildInput, BuildJob, collect};
use super::layout::Layout;
use super::out_of_core::OutOfCoreProbe;
use super::{Built, GpuHashJoinExec, JoinOutput, KeptBuild, Metrics, Probe, Shared, hash_join, probe_columns};
use crate::columns::DeviceBatch;
use crate::columns::row_width;
use crate::config::GpuConfig;
use crate::device::Gpu;
use crate::error::recoverable_on_cpu;
use crate::exec::cpu_join::CpuJoin;
use crate::exec::task_stream::TaskStream;
use crate::exec::upload::ChunkUploader;
use crate::exec::{
    DeviceBatchStream, as_gpu_exec, blocking, download_for_cpu, onto, partition_gpu, rows_within_limit, timeline,
};
use crate::join::triton::Arrival;
use crate::join::{JoinBuild, PhaseTimes};

/// Probes one device chunk of probe rows on `stream`, recording its rows and phase times, and
/// sends each output window to `tx` as it is made, waiting while the channel is full: the
/// join's output in device memory is then the windows in flight, not the chunk's whole fan-out.
/// Also returns how many windows it sent: a chunk that failed before its first can be joined
/// again elsewhere. Runs on a blocking thread.
pub(super) fn probe_chunk(
    build: &JoinBuild,
    metrics: &Metrics,
    stream: &Arc<CudaStream>,
    chunk: &DeviceBatch,
    tx: &mut mpsc::Sender<Result<JoinOutput>>,
) -> (Result<()>, usize) {
    metrics.probe_rows.add(chunk.num_rows());
    let mut times = PhaseTimes::default();
    let mut sent = 0;
    let out = build.probe_into(stream, chunk, &mut times, &mut |b| {
        metrics.sent(b.num_rows());
        sent += 1;
        futures::executor::block_on(tx.send(Ok(JoinOutput::Device(b))))
            .map_err(|_| DataFusionError::Execution("GPU join output dropped".into()))
    });
    metrics.add_phases(&times);
    (out, sent)
}

/// Passes output batches to the stream, counting them.
pub(super) async fn send(
    tx: &mut mpsc::Sender<Result<JoinOutput>>,
    metrics: &Metrics,
    outputs: Vec<JoinOutput>,
) -> Result<()> {
    for o in outputs {
        metrics.sent(o.num_rows());
        tx.send(Ok(o)).await.map_err(|_| DataFusionError::Execution("GPU join output dropped".into()))?;
    }
    Ok(())
}

/// Passes the output of DataFusion's join to the stream, counting it.
pub(super) async fn forward(
    tx: &mut mpsc::Sender<Result<JoinOutput>>,
    metrics: &Metrics,
    mut out: SendableRecordBatchStream,
) -> Result<()> {
    while let Some(b) = out.next().await.transpose()? {
        send(tx, metrics, vec![JoinOutput::Host(b)]).await?;
    }
    Ok(())
}

/// A boxed stream of results, as a join's inputs are read.
pub(super) type Input<T> = Pin<Box<dyn Stream<Item = Result<T>> + Send>>;

/// `input` read by a task of its own from now on, up to `ahead` (at least 1) items ahead of its
/// reader, and to its end or first error: a join's probe input then runs while the join builds,
/// not after (`gpu.join.probe_read_ahead`). The time a received item waits for room (the join
/// not taking it) is added to `stall`.
pub(super) fn read_ahead<T: Send + 'static>(mut input: Input<T>, ahead: usize, stall: Option<Time>) -> Input<T> {
    // A futures channel holds its buffer plus one item for each sender.
    let (mut tx, rx) = mpsc::channel::<Result<T>>(ahead.saturating_sub(1));
    let task = SpawnedTask::spawn(async move {
        while let Some(item) = input.next().await {
            let failed = item.is_err();
            let waited = Instant::now();
            // A closed channel: the join stopped reading (an error, a limit above it).
            let closed = tx.send(item).await.is_err();
            if let Some(stall) = &stall {
                stall.add_elapsed(waited);
            }
            if closed || failed {
                break;
            }
        }
    });
    Box::pin(TaskStream::new(rx, task, "a GPU join's probe read-ahead"))
}

/// `input` read whole by a task of its own from now on, its items handed out once it has ended
/// (`gpu.join.pipelined_inputs = false`: the join starts when both inputs are in).
pub(super) fn received_whole<T: Send + 'static>(input: Input<T>) -> Input<T> {
    let task = SpawnedTask::spawn(input.collect::<Vec<_>>());
    Box::pin(futures::stream::once(task).flat_map(|items| {
        futures::stream::iter(match items {
            Ok(items) => items,
            Err(e) => vec![Err(DataFusionError::Execution(format!("a GPU join's probe input failed: {e}")))],
        })
    }))
}

/// `input` with the time its reader waits for each item added to `metrics.input_wait_time`,
/// and, with `end`, its end marked there (see [`Metrics::mark`]).
struct TimedInput<T> {
    input: Input<T>,
    metrics: Metrics,
    end: Option<Time>,
    waiting_since: Option<Instant>,
}

impl<T> Stream for TimedInput<T> {
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<Result<T>>> {
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        let next = self.input.as_mut().poll_next(cx);
        if let Poll::Ready(item) = &next {
            self.waiting_since = None;
            self.metrics.input_wait_time.add_elapsed(since);
            if item.is_none()
                && let Some(end) = &self.end
            {
                self.metrics.mark(end);
            }
        }
        next
    }
}

/// `input` timed as [`TimedInput`] times it.
pub(super) fn timed_input<T: Send + 'static>(input: Input<T>, metrics: &Metrics, end: Option<Time>) -> Input<T> {
    Box::pin(TimedInput { input, metrics: metrics.clone(), end, waiting_since: None })
}

/// The probe input as the join takes it (`gpu.join.pipelined_inputs`, `gpu.join.probe_read_ahead`):
/// timed; pipelined, read ahead while the build arrives (not for a join planned out of core,
/// which partitions its probe side as it comes); blocking, received whole first.
fn probe_input(probe: Probe, cfg: &GpuConfig, planned_out_of_core: bool, metrics: &Metrics) -> Probe {
    let ahead = (cfg.probe_read_ahead > 0 && !planned_out_of_core).then_some(cfg.probe_read_ahead);
    match probe {
        Probe::Device(s) => Probe::Device(taken(s, cfg.pipelined_inputs, ahead, metrics)),
        Probe::Host(s) => {
            let schema = s.schema();
            let s = taken(Box::pin(s), cfg.pipelined_inputs, ahead, metrics);
            Probe::Host(Box::pin(RecordBatchStreamAdapter::new(schema, s)))
        }
    }
}

/// A probe input, timed, then received whole (not `pipelined`) or read `ahead`.
fn taken<T: Send + 'static>(s: Input<T>, pipelined: bool, ahead: Option<usize>, metrics: &Metrics) -> Input<T> {
    let s = timed_input(s, metrics, Some(metrics.probe_input_at.clone()));
    match (pipelined, ahead) {
        (false, _) => received_whole(s),
        (true, Some(ahead)) => read_ahead(s, ahead, Some(metrics.input_stall_time.clone())),
        (true, None) => s,
    }
}

/// Probe rows a partition had not joined when its device work failed: the device chunk that
/// failed, or the rows of the chunk being gathered (an upload failed), or none.
pub(super) enum Unjoined {
    None,
    Device(DeviceBatch),
    Uploading(ChunkUploader),
}

/// The probe side of one partition, after its build.
pub(super) struct PartitionRun {
    pub(super) gpu: Arc<Gpu>,
    /// The `HashJoinExec` the GPU join replaces.
    pub(super) join: Arc<dyn ExecutionPlan>,
    pub(super) layout: Arc<Layout>,
    pub(super) cfg: GpuConfig,
    pub(super) context: Arc<TaskContext>,
    pub(super) metrics: Metrics,
    pub(super) mode: PartitionMode,
    pub(super) shared: Arc<Shared>,
    pub(super) partition: usize,
    /// Rows per probe chunk of host input.
    pub(super) chunk_rows: usize,
    pub(super) who: String,
}

impl PartitionRun {
    /// The probe rows of `probe` after `head`, on the host in the probe columns' layout (device
    /// batches downloaded), for DataFusion's join.
    pub(super) fn host_probe(&self, head: Vec<RecordBatch>, probe: Probe) -> SendableRecordBatchStream {
        let schema = Arc::clone(&self.layout.probe_schema);
        let rest: Pin<Box<dyn Stream<Item = Result<RecordBatch>> + Send>> = match probe {
            Probe::Host(stream) => {
                let cols = self.layout.probe_cols.clone();
                Box::pin(stream.map(move |b| Ok(b?.project(&cols)?)))
            }
            Probe::Device(stream) => {
                let layout = Arc::clone(&self.layout);
                Box::pin(stream.then(move |d| {
                    let layout = Arc::clone(&layout);
                    async move { download_for_cpu(probe_columns(&layout, &d?)?).await }
                }))
            }
        };
        let rows = futures::stream::iter(head.into_iter().map(Ok)).chain(rest);
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }

    /// This partition on DataFusion's join `cpu` (probe partition `at` of it), after its build
    /// went there.
    pub(super) async fn on_cpu(
        self,
        cpu: &CpuJoin,
        at: usize,
        probe: Probe,
        tx: &mut mpsc::Sender<Result<JoinOutput>>,
    ) -> Result<()> {
        timeline::mark(&self.who, || "probed by DataFusion's join".into());
        let out = cpu.execute(at, self.host_probe(Vec::new(), probe), Arc::clone(&self.context))?;
        forward(tx, &self.metrics, out).await
    }

    /// Probes the device build `build` with `probe`'s rows, chunk by chunk. When a chunk fails
    /// for want of device memory before any of its output was sent, and the rows already joined
    /// do not decide build rows (or there are none), the partition's remaining rows go to
    /// DataFusion's join over the kept build rows (`kept`).
    pub(super) async fn probe(
        self,
        build: Arc<JoinBuild>,
        kept: Option<Arc<KeptBuild>>,
        probe: Probe,
        tx: &mut mpsc::Sender<Result<JoinOutput>>,
    ) -> Result<()> {
        let who = &self.who;
        if build.probe_is_moot() {
            // Nothing to output: the probe input is dropped unread, as DataFusion's join
            // drops it (its operators' errors must not surface here when they do not there).
            timeline::mark(who, || "empty build: the probe side is not read".into());
            if self.mode == PartitionMode::CollectLeft {
                self.shared.probe_done();
            }
            return Ok(());
        }
        let kept = kept.filter(|_| self.cfg.cpu_fallback);
        let mut joined_any = false;
        let stopped = match probe {
            Probe::Device(mut stream) => {
                let mut stop = None;
                while let Some(dev) = stream.next().await.transpose()? {
                    if dev.num_rows() == 0 {
                        continue;
                    }
                    timeline::mark(who, || format!("probe device batch of {} rows arrived", dev.num_rows()));
                    let chunk = probe_columns(&self.layout, &dev)?;
                    let (build, m, mut out, c) = (Arc::clone(&build), self.metrics.clone(), tx.clone(), chunk.clone());
                    // On the stream that produced the batch, so the probe follows it.
                    let (joined, sent) =
                        blocking(move || Ok(probe_chunk(&build, &m, c.stream(), &c, &mut out))).await?;
                    match joined {
                        Ok(()) => joined_any = true,
                        Err(e) => {
                            stop = Some((e, sent, Unjoined::Device(chunk)));
                            break;
                        }
                    }
                }
                stop.map(|(e, sent, unjoined)| (e, sent, unjoined, Probe::Device(stream)))
            }
            Probe::Host(mut stream) => {
                // Probe rows go to the device as they arrive; each full chunk is probed. Nothing
                // is kept on the host beside them (the input's memory goes as its groups go up):
                // when device work fails, the rows not joined are the chunk that failed, or the
                // uploader's (its groups on the device, the group that failed on the host).
                let mut uploader = ChunkUploader::new(
                    Arc::clone(&self.gpu),
                    self.chunk_rows,
                    self.metrics.upload_time.clone(),
                    self.metrics.pack_time.clone(),
                );
                let (mut first, mut stop) = (true, None);
                loop {
                    let next = stream.next().await.transpose()?;
                    let done = next.is_none();
                    let chunk = match next {
                        Some(b) => {
                            if std::mem::take(&mut first) {
                                timeline::mark(who, || format!("first probe batch of {} rows arrived", b.num_rows()));
                            }
                            uploader.push(b.project(&self.layout.probe_cols)?).await
                        }
                        None => uploader.finish().await,
                    };
                    let chunk = match chunk {
                        Ok(Some(chunk)) => chunk,
                        Ok(None) if done => break,
                        Ok(None) => continue,
                        Err(e) => {
                            stop = Some((e, 0, Unjoined::Uploading(uploader)));
                            break;
                        }
                    };
                    timeline::mark(who, || format!("probe chunk of {} rows on the device", chunk.num_rows()));
                    // The chunk's rows, should DataFusion's join have to take them (shared, not copied).
                    let failed_chunk = kept.is_some().then(|| chunk.clone());
                    let (build, m, w, mut out) = (Arc::clone(&build), self.metrics.clone(), who.clone(), tx.clone());
                    let (joined, sent) = blocking(move || {
                        let joined = probe_chunk(&build, &m, chunk.stream(), &chunk, &mut out);
                        timeline::mark(&w, || "probe chunk joined".into());
                        Ok(joined)
                    })
                    .await?;
                    match joined {
                        Ok(()) => joined_any = true,
                        Err(e) => {
                            stop = Some((e, sent, failed_chunk.map_or(Unjoined::None, Unjoined::Device)));
                            break;
                        }
                    }
                    if done {
                        break;
                    }
                }
                stop.map(|(e, sent, unjoined)| (e, sent, unjoined, Probe::Host(stream)))
            }
        };
        let emits = build.spec().emits_build_rows();
        if let Some((failed, sent, unjoined, rest)) = stopped {
            // DataFusion's join can take the rest of the partition when nothing of the failed
            // chunk was sent and the build rows decided at the end depend on no rows joined here
            // (or on none of any other partition's, in Partitioned mode before the first chunk).
            let takes_over = !emits || (self.mode == PartitionMode::Partitioned && !joined_any);
            let kept = match &kept {
                Some(k) if sent == 0 && takes_over && recoverable_on_cpu(&failed) => Arc::clone(k),
                _ => return Err(failed),
            };
            drop(build);
            timeline::mark(who, || format!("the rest of the probe goes to the CPU after: {failed}"));
            log::debug!("GPU join partition {} finishes on DataFusion's join: {failed}", self.partition);
            self.metrics.cpu_fallbacks.add(1);
            let head = match unjoined {
                Unjoined::None => Vec::new(),
                Unjoined::Device(chunk) => vec![download_for_cpu(chunk).await?],
                Unjoined::Uploading(uploader) => uploader.into_rows().await?,
            };
            let cpu = CpuJoin::new(hash_join(&self.join)?, &self.layout.sides(), kept.batches.clone(), 1)?;
            let out = cpu.execute(0, self.host_probe(head, rest), Arc::clone(&self.context))?;
            forward(tx, &self.metrics, out).await?;
            if self.mode == PartitionMode::CollectLeft {
                // No build rows to emit (see `takes_over`): only the count of partitions.
                self.shared.probe_done();
            }
            return Ok(());
        }
        timeline::mark(who, || "probe input ended".into());
        let last = match self.mode {
            PartitionMode::CollectLeft => self.shared.probe_done(),
            _ => true,
        };
        if last && emits {
            let (gpu, m) = (Arc::clone(&self.gpu), self.metrics.clone());
            let outputs = blocking(move || {
                let mut times = PhaseTimes::default();
                let out = build.finish(&gpu.stream(), &mut times)?;
                m.add_phases(&times);
                Ok(out)
            })
            .await?;
            send(tx, &self.metrics, outputs.into_iter().map(JoinOutput::Device).collect()).await?;
        }
        Ok(())
    }
}

/// The build side must hold at least this many rows for a join to read its probe side ahead and
/// build on it instead (below, one build costs little either way).
const SWAP_MIN_BUILD_ROWS: usize = 1 << 18;
/// ... and this many times the probe side's rows.
const SWAP_RATIO: usize = 4;

/// Collects the build input of a one-partition join over device inputs; when it holds at least
/// [`SWAP_MIN_BUILD_ROWS`] rows, reads the probe side ahead while that holds at most a
/// [`SWAP_RATIO`]th of them. A probe side that ends within that is built on (`swapped`, the
/// join's layout with the sides' roles exchanged), and the build input's batches are probed:
/// the output is the same, for far less build work. Otherwise, or when that build fails for
/// want of device memory, the join builds as planned and probes the batches read ahead first.
async fn sides_at_run_time(
    job: BuildJob,
    run: PartitionRun,
    swapped: Layout,
    left: Arc<dyn ExecutionPlan>,
    partitions: std::ops::Range<usize>,
    mut probe: DeviceBatchStream,
) -> Result<(Built, Probe, PartitionRun)> {
    let input = collect(&left, partitions, &job.gpu, &job.layout, &job.context, &job.metrics, None).await?;
    job.metrics.mark(&job.metrics.build_input_at);
    let parts = match input {
        BuildInput::Device(parts) => parts,
        host => return Ok((job.prepare(host).await?, Probe::Device(probe), run)),
    };
    let build_rows: usize = parts.iter().map(DeviceBatch::num_rows).sum();
    let (mut head, mut probe_rows, mut ended) = (Vec::new(), 0usize, false);
    if build_rows >= SWAP_MIN_BUILD_ROWS {
        while probe_rows.saturating_mul(SWAP_RATIO) <= build_rows {
            match probe.next().await.transpose()? {
                Some(b) => {
                    probe_rows += b.num_rows();
                    head.push(b);
                }
                None => {
                    ended = true;
                    break;
                }
            }
        }
    }
    if ended && probe_rows > 0 && probe_rows.saturating_mul(SWAP_RATIO) <= build_rows {
        let probe_side = head.iter().map(|b| probe_columns(&job.layout, b)).collect::<Result<Vec<_>>>()?;
        let swapped = Arc::new(swapped);
        let (built, _) = job.swapped(Arc::clone(&swapped)).in_memory(BuildInput::Device(probe_side), probe_rows).await;
        match built {
            Ok(built) => {
                timeline::mark(&run.who, || {
                    format!("sides swapped at run time: builds the probe side's {probe_rows} rows, probes {build_rows}")
                });
                job.metrics.swapped_at_run_time.add(1);
                let probe: DeviceBatchStream = Box::pin(futures::stream::iter(parts.into_iter().map(Ok)));
                return Ok((built, Probe::Device(probe), PartitionRun { layout: swapped, ..run }));
            }
            Err(e) if recoverable_on_cpu(&e) => {
                timeline::mark(&run.who, || format!("the swapped build failed ({e}): builds as planned"));
            }
            Err(e) => return Err(e),
        }
    }
    let head = futures::stream::iter(head.into_iter().map(Ok));
    let probe: DeviceBatchStream = match ended {
        true => Box::pin(head),
        false => Box::pin(head.chain(probe)),
    };
    Ok((job.prepare(BuildInput::Device(parts)).await?, Probe::Device(probe), run))
}

/// The device a join partition runs on: a `CollectLeft` join's every partition shares one build,
/// on the home device; a `Partitioned` join's partitions are spread like their inputs
/// ([`partition_gpu`]).
pub(super) fn join_gpu(
    cfg: &GpuConfig,
    context: &TaskContext,
    mode: PartitionMode,
    partition: usize,
) -> Result<Arc<Gpu>> {
    match mode {
        PartitionMode::Partitioned => partition_gpu(cfg, context, partition),
        _ => Gpu::for_session(cfg, &context.session_id()),
    }
}

impl GpuHashJoinExec {
    /// The output of partition `partition`: device batches, and host ones where DataFusion's
    /// join finished the work.
    pub(super) fn execute_output(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<Pin<Box<dyn Stream<Item = Result<JoinOutput>> + Send>>> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let hj = self.hash_join()?;
        let mode = self.mode()?;
        let gpu = join_gpu(&cfg, &context, mode, partition)?;
        let (left, right) = (Arc::clone(hj.left()), Arc::clone(hj.right()));
        let probe_partitions = right.output_partitioning().partition_count();
        let build_partitions = match mode {
            PartitionMode::CollectLeft => 0..left.output_partitioning().partition_count(),
            PartitionMode::Partitioned => partition..partition + 1,
            PartitionMode::Auto => {
                return Err(DataFusionError::Internal(
                    "a GPU hash join in mode Auto: the mode must be resolved".into(),
                ));
            }
        };
        let metrics = Metrics::new(&self.metrics, partition);
        let who = match timeline::enabled() {
            true => {
                let on: Vec<String> = hj.on().iter().map(|(l, r)| format!("{l}={r}")).collect();
                format!("join [{}] p{partition}", on.join(", "))
            }
            false => String::new(),
        };
        timeline::mark(&who, || format!("start ({:?})", mode));
        let layout = Arc::clone(&self.layout);
        let estimate = self.estimate.clone();
        let shared = Arc::clone(&self.shared);
        let planned_out_of_core = self.out_of_core.is_some();
        shared.started.fetch_add(1, Ordering::SeqCst);
        let started = Arc::clone(&shared.started);
        let memory_pool = Arc::clone(context.memory_pool());
        // An out-of-core join sends each output row to the stream its probe row came from only
        // when the output is partitioned like the probe side; otherwise any stream takes it.
        let route = !matches!(
            self.properties().output_partitioning(),
            Partitioning::UnknownPartitioning(_) | Partitioning::RoundRobinBatch(_)
        );
        // Probe chunks of every partition take at most a quarter of the memory limit between them.
        let memory_rows = rows_within_limit(&gpu, probe_partitions as u64, row_width(&self.layout.probe_schema));
        let chunk_rows = cfg.batch_rows.max(1).min(memory_rows as usize);
        // A GPU child hands over its device batches directly (no download and upload between
        // two GPU operators); any other child is read as host batches and uploaded in chunks.
        let probe = match as_gpu_exec(&right) {
            Some(gpu_child) => Probe::Device(onto(gpu_child.execute_device(partition, Arc::clone(&context))?, &gpu)),
            None => Probe::Host(right.execute(partition, Arc::clone(&context))?),
        };
        let probe = probe_input(probe, &cfg, planned_out_of_core, &metrics);
        let job = BuildJob {
            gpu: Arc::clone(&gpu),
            join: Arc::clone(&self.join),
            layout: Arc::clone(&layout),
            estimate: estimate.clone(),
            cfg: cfg.clone(),
            context: Arc::clone(&context),
            metrics: metrics.clone(),
            // Output streams that may hold windows at once: every probe partition (in
            // Partitioned mode each runs a join of its own, at the same time).
            consumers: probe_partitions,
            consumers_share_build: mode == PartitionMode::CollectLeft,
            route,
            planned_out_of_core,
            who: who.clone(),
        };
        let run = PartitionRun {
            gpu: Arc::clone(&gpu),
            join: Arc::clone(&self.join),
            layout: Arc::clone(&layout),
            cfg: cfg.clone(),
            context,
            metrics: metrics.clone(),
            mode,
            shared: Arc::clone(&shared),
            partition,
            chunk_rows,
            who: who.clone(),
        };
        // A join in one partition over device inputs may build on the smaller side, chosen on
        // the real sizes (there is no other partition to share the build with).
        let swapped = match &probe {
            Probe::Device(_)
                if cfg.join_swap_at_run_time
                    && mode == PartitionMode::CollectLeft
                    && probe_partitions == 1
                    && !planned_out_of_core =>
            {
                layout.swapped()
            }
            _ => None,
        };
        let (mut tx, rx) = mpsc::channel::<Result<JoinOutput>>(2);
        let done = metrics.clone();
        let task = SpawnedTask::spawn(async move {
            let result = async {
                let (built, probe, run) = match (swapped, probe) {
                    (Some(swapped), Probe::Device(probe)) => {
                        shared.remaining.store(probe_partitions, Ordering::SeqCst);
                        sides_at_run_time(job, run, swapped, left, build_partitions, probe).await?
                    }
                    (_, probe) => {
                        let built = if mode == PartitionMode::CollectLeft {
                            let init = || {
                                shared.remaining.store(probe_partitions, Ordering::SeqCst);
                                job.run(left, build_partitions)
                            };
                            shared.build.get_or_start(init).await?
                        } else {
                            job.run(left, build_partitions).await?
                        };
                        (built, probe, run)
                    }
                };
                timeline::mark(&who, || "build ready".into());
                match built {
                    Built::Memory(build, kept) => run.probe(build, kept, probe, &mut tx).await,
                    Built::OnCpu(cpu) => {
                        let at = if mode == PartitionMode::CollectLeft { partition } else { 0 };
                        run.on_cpu(&cpu, at, probe, &mut tx).await
                    }
                    Built::Spilled(ooc) => {
                        let arrival = Arrival::new(&ooc.meeting);
                        let job = OutOfCoreProbe { ooc, gpu, layout, estimate, metrics, route, started, memory_pool };
                        job.run(probe, &tx, arrival).await
                    }
                }
            }
            .await;
            done.mark(&done.done_at);
            if let Err(e) = result {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(Box::pin(TaskStream::new(rx, task, "a GPU hash join")))
    }
}
