//! The out-of-core join's driver: every probe stream partitions its rows into pinned host
//! memory and hands them over; one driver then joins partition by partition, copying the next
//! build chunk or probe group up while the current one is joined, and sends the output to the
//! streams still reading. With a device set, the partitions are dealt to its devices, one
//! driver loop per device side by side.

use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use futures::channel::mpsc;
use futures::{FutureExt, StreamExt};

use super::build::{build_spec, chunk_groups, per_row};
use super::layout::Layout;
use super::{JoinOutput, Metrics, Probe, probe_columns};
use crate::columns::DeviceBatch;
use crate::cost::join::JoinEstimate;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::CudaResultExt;
use crate::exec::upload::batch_bytes;
use crate::exec::{blocking, timeline};
use crate::join::triton::{Arrival, Arrived, DriverGuard, Group, Keep, Meeting, Round, SpillSizes, SpilledSide};
use crate::join::{JoinBuild, PhaseTimes};

/// The build side of an out-of-core join ([`crate::join::triton`]).
#[derive(Debug)]
pub(super) struct OutOfCore {
    pub(super) build: SpilledSide,
    /// The build rows' host memory, reserved from DataFusion's memory pool.
    pub(super) _reservation: MemoryReservation,
    pub(super) sizes: SpillSizes,
    /// The steps of the join, in order.
    pub(super) steps: Vec<Step>,
    /// Where the probe streams hand over their partitioned input.
    pub(super) meeting: Arc<Meeting<Handover>>,
}

/// What a probe stream hands to the out-of-core join's driver: its probe rows in host
/// partitions, the sender of its output stream, and its metrics.
pub(super) struct Handover {
    pub(super) side: Arc<SpilledSide>,
    /// `None` in what an earlier round kept for the last one (see [`Meeting`]): its stream has
    /// had its output.
    pub(super) tx: Option<mpsc::Sender<Result<JoinOutput>>>,
    pub(super) metrics: Metrics,
}

impl Keep for Handover {
    fn keep(&self) -> Self {
        Handover { side: Arc::clone(&self.side), tx: None, metrics: self.metrics.clone() }
    }
}

/// One step of an out-of-core join: a chunk of one partition's build pieces (a partition too
/// large for one build state is built in several chunks, each probed by the whole partition).
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub(super) part: usize,
    pub(super) pieces: std::ops::Range<usize>,
    pub(super) first: bool,
    pub(super) last: bool,
}

impl OutOfCore {
    /// `keep_earlier`: the join emits build rows decided by every probe row, so the last round
    /// of its meeting probes the rows of earlier rounds again (see [`Meeting`]).
    pub(super) fn new(
        build: SpilledSide,
        reservation: MemoryReservation,
        sizes: SpillSizes,
        consumers: usize,
        keep_earlier: bool,
    ) -> Self {
        let mut steps = Vec::new();
        for part in 0..build.partitions() {
            let mut groups: Vec<_> =
                build.groups(part, sizes.build_bytes, false).into_iter().map(|g| g.pieces).collect();
            if groups.is_empty() {
                groups.push(0..0);
            }
            let n = groups.len();
            steps.extend(groups.into_iter().enumerate().map(|(i, pieces)| Step {
                part,
                pieces,
                first: i == 0,
                last: i + 1 == n,
            }));
        }
        OutOfCore { build, _reservation: reservation, sizes, steps, meeting: Meeting::new(consumers, keep_earlier) }
    }
}

/// Everything one probe stream of an out-of-core join needs.
pub(super) struct OutOfCoreProbe {
    pub(super) ooc: Arc<OutOfCore>,
    pub(super) gpu: Arc<Gpu>,
    pub(super) layout: Arc<Layout>,
    pub(super) estimate: Option<Arc<JoinEstimate>>,
    pub(super) metrics: Metrics,
    /// Whether each output row must go to the stream its probe row came from (the join's
    /// output partitioning is the probe side's); otherwise any stream still reading takes it.
    pub(super) route: bool,
    /// Probe streams of the join started so far (their `execute` called): a stream does not
    /// wait at the meeting for one not started.
    pub(super) started: Arc<std::sync::atomic::AtomicUsize>,
    /// DataFusion's memory pool, which the stream's probe rows in host memory are reserved from.
    pub(super) memory_pool: Arc<dyn MemoryPool>,
}

impl OutOfCoreProbe {
    /// Partitions one probe batch into `side` (device work in a partitioning slot).
    pub(super) async fn split(&self, side: SpilledSide, batch: ProbeBatch) -> Result<SpilledSide> {
        let (gpu, layout, m) = (Arc::clone(&self.gpu), Arc::clone(&self.layout), self.metrics.clone());
        let _t = m.spill_time.timer();
        let slot = self.gpu.split_slot().await?;
        blocking(move || {
            let _slot = slot;
            let stream = gpu.stream();
            let mut trace = crate::join::triton::Trace::new(&gpu, &stream);
            let mut side = side;
            let dev = match batch {
                ProbeBatch::Device(d) => d,
                ProbeBatch::Host(h) => {
                    let _u = m.upload_time.timer();
                    DeviceBatch::upload_concat(&gpu, &stream, &h)?
                }
            };
            trace.step("upload");
            trace.print("split");
            m.probe_rows.add(dev.num_rows());
            let before = side.bytes;
            side.add(&gpu, &dev, &layout.spec.keys, &layout.spec.probe_keys)?;
            m.spill_bytes.add((side.bytes - before) as usize);
            Ok(side)
        })
        .await
    }

    /// Partitions one chunk into `side` and reserves the host memory its rows took.
    async fn split_reserved(
        &self,
        side: SpilledSide,
        batch: ProbeBatch,
        reservation: &mut MemoryReservation,
    ) -> Result<SpilledSide> {
        let before = side.bytes;
        let side = self.split(side, batch).await?;
        reservation.try_grow((side.bytes - before) as usize)?;
        Ok(side)
    }

    /// This stream's probe input, partitioned into host memory (reserved in `reservation`).
    pub(super) async fn read_probe(&self, probe: Probe, reservation: &mut MemoryReservation) -> Result<SpilledSide> {
        let sizes = self.ooc.sizes;
        let mut side = SpilledSide::new(Arc::clone(&self.layout.probe_schema), sizes.bits);
        match probe {
            Probe::Device(mut stream) => {
                while let Some(dev) = stream.next().await.transpose()? {
                    if dev.num_rows() > 0 {
                        let batch = probe_columns(&self.layout, &dev)?;
                        side = self.split_reserved(side, ProbeBatch::Device(batch), reservation).await?;
                    }
                }
            }
            Probe::Host(mut stream) => {
                let mut pending: Vec<RecordBatch> = Vec::new();
                let (mut bytes, mut rows) = (0u64, 0usize);
                loop {
                    let next = stream.next().await.transpose()?;
                    let done = next.is_none();
                    if let Some(b) = next {
                        let b = b.project(&self.layout.probe_cols)?;
                        bytes += batch_bytes(&b);
                        rows += b.num_rows();
                        pending.push(b);
                    }
                    let chunk_rows = sizes.split_rows(per_row(bytes, rows));
                    if !pending.is_empty() && (rows >= chunk_rows || done) {
                        // Whole chunks by the rows' size, each assembled from its batches as
                        // it is copied up; a short last one waits for more rows unless done.
                        let mut chunks = chunk_groups(&pending, chunk_rows);
                        pending.clear();
                        (bytes, rows) = (0, 0);
                        let short = chunks
                            .last()
                            .is_some_and(|c| c.iter().map(RecordBatch::num_rows).sum::<usize>() < chunk_rows);
                        if short && !done {
                            pending = chunks.pop().unwrap_or_default();
                            bytes = pending.iter().map(batch_bytes).sum();
                            rows = pending.iter().map(RecordBatch::num_rows).sum();
                        }
                        for chunk in chunks {
                            side = self.split_reserved(side, ProbeBatch::Host(chunk), reservation).await?;
                        }
                    }
                    if done {
                        break;
                    }
                }
            }
        }
        Ok(side)
    }

    /// Reads the whole probe input into host partitions and hands them over; the last stream of
    /// a round to do so starts its driver ([`OutOfCoreProbe::drive`]), which sends this stream's
    /// output to `tx`. Returns when the stream's round has ended.
    pub(super) async fn run(
        self,
        probe: Probe,
        tx: &mpsc::Sender<Result<JoinOutput>>,
        arrival: Arrival<Handover>,
    ) -> Result<()> {
        // Held until this stream's round has ended (the driver reads the rows until then).
        let mut reservation = MemoryConsumer::new("GpuHashJoinExec out-of-core probe rows").register(&self.memory_pool);
        let side = match self.read_probe(probe, &mut reservation).await {
            Ok(side) => side,
            Err(e) => {
                // Every stream stops with this error (its kind kept: a device memory error stays one).
                self.ooc.meeting.fail_with(&e);
                return Err(e);
            }
        };
        timeline::mark("out-of-core", || format!("a probe stream handed over {} rows", side.rows));
        let meeting = Arc::clone(&self.ooc.meeting);
        let wait = self.metrics.handover_wait_time.clone();
        let entry = Handover { side: Arc::new(side), tx: Some(tx.clone()), metrics: self.metrics.clone() };
        let started = self.started.load(std::sync::atomic::Ordering::SeqCst);
        let round = match arrival.arrive(entry, started)? {
            Arrived::Wait(round) => round,
            Arrived::Drive(round) => {
                let number = round.number;
                let guard = DriverGuard(Arc::clone(&meeting), number);
                let task = SpawnedTask::spawn(async move {
                    match self.drive(round).await {
                        Ok(()) => guard.0.finish(number),
                        Err(e) => guard.0.fail_with(&e),
                    }
                });
                meeting.add_driver(task);
                number
            }
        };
        let _w = wait.timer();
        meeting.wait(round).await
    }

    /// Joins every stream's probe rows partition by partition: each build chunk of a partition
    /// is prepared once, and its probe pieces, whatever stream they came from, are joined in
    /// groups of at most `group_bytes` (by stream when `route`); output goes to the streams through
    /// [`Outputs`]. Every build chunk and probe group is copied up from pinned memory while the
    /// one before it is joined ([`Prefetch`]). Stops early when no stream reads any more.
    ///
    /// The build rows decided at the end are emitted by the last round only, which probes the
    /// rows earlier rounds kept again, its output of them discarded, so that every probe row
    /// decides them.
    ///
    /// With a device set (`gpu.devices`), the partitions are dealt to its devices in turn and
    /// each device joins its own, side by side ([`Self::drive_on`]): every device copies its
    /// partitions up over its own host link. A partition's build chunks and probe groups all
    /// stay on one device, so each build row is decided there.
    pub(super) async fn drive(self, round: Round<Handover>) -> Result<()> {
        let sizes = self.ooc.sizes;
        let mut side = SpilledSide::new(Arc::clone(&self.layout.probe_schema), sizes.bits);
        let Round { entries, earlier, last, .. } = round;
        let mut outputs = Outputs { targets: Vec::with_capacity(entries.len()), next: 0, fed: sizes.outputs };
        // Per origin: whether its output is discarded (rows an earlier round answered).
        let mut discard = Vec::with_capacity(entries.len() + earlier.len());
        for (e, kept) in entries.into_iter().map(|e| (e, false)).chain(earlier.into_iter().map(|e| (e, true))) {
            side.absorb(&e.side, discard.len())?;
            outputs.targets.push(e.tx.filter(|_| !kept).map(|tx| (tx, e.metrics)));
            discard.push(kept);
        }
        let side = Arc::new(side);
        let spec = Arc::clone(&self.layout.spec);
        let emit_build_rows = spec.emits_build_rows() && last;
        // Groups of one stream's rows when the output is routed or some rows' output is discarded.
        let by_origin = self.route || discard.contains(&true);
        // Each step's probe groups (those of its partition), and what is copied up, in order.
        let mut plan: Vec<(Step, Arc<Vec<Group>>)> = Vec::new();
        let mut groups = Arc::new(Vec::new());
        for step in &self.ooc.steps {
            if step.first {
                groups = Arc::new(side.groups(step.part, sizes.group_bytes, by_origin));
            }
            // A build is needed to probe, or to emit the build rows decided at the end.
            if !groups.is_empty() || emit_build_rows {
                plan.push((step.clone(), Arc::clone(&groups)));
            }
        }
        // Each device's share of the plan: whole partitions, dealt in turn.
        let set = self.gpu.device_set();
        let mut shares: Vec<Vec<(Step, Arc<Vec<Group>>)>> = set.iter().map(|_| Vec::new()).collect();
        let mut dealt = 0usize;
        for (i, item) in plan.into_iter().enumerate() {
            if item.0.first && i > 0 {
                dealt += 1;
            }
            shares[dealt % set.len()].push(item);
        }
        timeline::mark("out-of-core", || {
            let steps: Vec<usize> = shares.iter().map(Vec::len).collect();
            format!("driving steps {steps:?} on {} device(s)", set.len())
        });
        let outputs = tokio::sync::Mutex::new(outputs);
        let drivers = set
            .into_iter()
            .zip(shares)
            .filter(|(_, plan)| !plan.is_empty())
            .map(|(gpu, plan)| self.drive_on(gpu, plan, Arc::clone(&side), &outputs, &discard, emit_build_rows));
        futures::future::try_join_all(drivers).await?;
        timeline::mark("out-of-core", || "driven to the end".into());
        Ok(())
    }

    /// Joins the steps of `plan` (whole partitions, in order) on `gpu`: see [`Self::drive`].
    async fn drive_on(
        &self,
        gpu: Arc<Gpu>,
        plan: Vec<(Step, Arc<Vec<Group>>)>,
        side: Arc<SpilledSide>,
        outputs: &tokio::sync::Mutex<Outputs>,
        discard: &[bool],
        emit_build_rows: bool,
    ) -> Result<()> {
        let sizes = self.ooc.sizes;
        let spec = Arc::clone(&self.layout.spec);
        let mut loads = Vec::new();
        for (step, groups) in &plan {
            loads.push((Load::Build, step.part, step.pieces.clone()));
            loads.extend(groups.iter().map(|g| (Load::Probe, step.part, g.pieces.clone())));
        }
        let mut prefetch =
            Prefetch::new(Arc::clone(&gpu), Arc::clone(&self.ooc), Arc::clone(&side), self.metrics.clone(), loads);
        // Probe flags of the current partition's groups, kept across its build chunks.
        let mut flags: Vec<Arc<DeviceBuffer>> = Vec::new();
        for (step, groups) in plan {
            let chunked = !(step.first && step.last);
            if step.first && chunked && spec.needs_probe_flags() {
                let (gpu, side, groups) = (Arc::clone(&gpu), Arc::clone(&side), Arc::clone(&groups));
                let part = step.part;
                flags = blocking(move || {
                    let stream = gpu.stream();
                    let out = groups
                        .iter()
                        .map(|g| {
                            let rows = side.group_rows(part, g.pieces.clone()) as usize;
                            gpu.alloc_filled(&stream, rows, 0, "probe flags across build chunks").map(Arc::new)
                        })
                        .collect::<crate::error::Result<Vec<_>>>()?;
                    stream.synchronize().gpu("waiting for the probe flags")?;
                    Ok(out)
                })
                .await?;
            }
            let build = {
                let dev = prefetch.next(Load::Build).await?;
                let (gpu, layout, m) = (Arc::clone(&gpu), Arc::clone(&self.layout), self.metrics.clone());
                let (estimate, part) = (self.estimate.clone(), step.part);
                let slot = gpu.spill_slot().await?;
                blocking(move || {
                    let _t = m.build_time.timer();
                    let _slot = slot;
                    let window = Some(sizes.window_rows);
                    let mut spec = build_spec(&layout, estimate.as_deref(), dev.num_rows(), window);
                    if spec.algorithm.multi_gpu() {
                        // Each out-of-core partition is joined on the session's device.
                        spec = Arc::new(crate::join::multi_gpu::device_spec(&spec));
                    }
                    m.ran(spec.algorithm);
                    // The build runs on the stream its rows were copied up on.
                    let stream = Arc::clone(dev.stream());
                    let mut trace = crate::join::triton::Trace::new(&gpu, &stream);
                    let rows = dev.num_rows();
                    let build = JoinBuild::new(Arc::clone(&gpu), &stream, spec, dev)?;
                    m.add_phases(&build.times);
                    trace.step("build");
                    trace.print(&format!("build part {part} of {rows} rows"));
                    Ok(Arc::new(build))
                })
                .await?
            };
            timeline::mark("out-of-core", || format!("partition {} built", step.part));
            for (h, group) in groups.iter().enumerate() {
                let dev = prefetch.next(Load::Probe).await?;
                let (gpu, build, m) = (Arc::clone(&gpu), Arc::clone(&build), self.metrics.clone());
                let last = step.last;
                let f = if chunked { flags.get(h).cloned() } else { None };
                let slot = gpu.spill_slot().await?;
                let out = blocking(move || {
                    let _slot = slot;
                    let stream = Arc::clone(dev.stream());
                    let mut trace = crate::join::triton::Trace::new(&gpu, &stream);
                    let mut times = PhaseTimes::default();
                    let out = build.probe_part(&stream, &dev, &mut times, f.as_deref(), last)?;
                    m.add_phases(&times);
                    // Done before the slot goes to the next step: memory this step freed is
                    // reused at once (stream-ordered frees on other streams are not).
                    stream.synchronize().gpu("waiting for an out-of-core probe")?;
                    trace.step("probe");
                    for (name, d) in [
                        ("keys", times.keys),
                        ("transform", times.transform),
                        ("match", times.matching),
                        ("materialize", times.materialize),
                    ] {
                        trace.note(name, d);
                    }
                    trace.print(&format!("probe {} rows, {} out", dev.num_rows(), out.len()));
                    Ok(out)
                })
                .await?;
                timeline::mark("out-of-core", || format!("partition {} group {h} probed", step.part));
                if discard.get(group.origin).copied().unwrap_or(false) {
                    continue;
                }
                if !outputs.lock().await.send(self.route.then_some(group.origin), out).await {
                    return Ok(());
                }
                timeline::mark("out-of-core", || format!("partition {} group {h} sent", step.part));
            }
            if step.last {
                flags.clear();
            }
            if emit_build_rows {
                let (gpu, m) = (Arc::clone(&gpu), self.metrics.clone());
                let slot = gpu.spill_slot().await?;
                let out = blocking(move || {
                    let _slot = slot;
                    let mut times = PhaseTimes::default();
                    let stream = gpu.stream();
                    // `finish` waits for its last phase.
                    let out = build.finish(&stream, &mut times)?;
                    m.add_phases(&times);
                    Ok(out)
                })
                .await?;
                if !outputs.lock().await.send(None, out).await {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// What the out-of-core driver copies up next: a step's build pieces, or a group of probe
/// pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Load {
    Build,
    Probe,
}

/// The out-of-core driver's uploads, one ahead: once a build chunk or probe group is on the
/// device, the next one is copied up from pinned host memory (a DMA copy on its own stream, on
/// its own blocking thread) while this one is joined, so the link's upload overlaps the
/// kernels. One extra chunk is on the device at a time.
pub(super) struct Prefetch {
    pub(super) gpu: Arc<Gpu>,
    pub(super) ooc: Arc<OutOfCore>,
    pub(super) probe: Arc<SpilledSide>,
    pub(super) metrics: Metrics,
    /// Every upload in order: which side, its partition and its pieces.
    pub(super) loads: Vec<(Load, usize, std::ops::Range<usize>)>,
    pub(super) at: usize,
    pub(super) pending: Option<futures::future::BoxFuture<'static, Result<DeviceBatch>>>,
}

impl Prefetch {
    pub(super) fn new(
        gpu: Arc<Gpu>,
        ooc: Arc<OutOfCore>,
        probe: Arc<SpilledSide>,
        metrics: Metrics,
        loads: Vec<(Load, usize, std::ops::Range<usize>)>,
    ) -> Self {
        Prefetch { gpu, ooc, probe, metrics, loads, at: 0, pending: None }
    }

    /// Starts copying up upload `i`, if there is one.
    pub(super) fn start(&self, i: usize) -> Option<futures::future::BoxFuture<'static, Result<DeviceBatch>>> {
        let (load, part, pieces) = self.loads.get(i).cloned()?;
        let (gpu, ooc, probe, m) =
            (Arc::clone(&self.gpu), Arc::clone(&self.ooc), Arc::clone(&self.probe), self.metrics.clone());
        Some(
            blocking(move || {
                let _u = m.upload_time.timer();
                let stream = gpu.stream();
                let side = match load {
                    Load::Build => &ooc.build,
                    Load::Probe => probe.as_ref(),
                };
                side.restore(&gpu, &stream, part, pieces)
            })
            .boxed(),
        )
    }

    /// The next upload, which must be of `load`'s side; the one after it starts.
    pub(super) async fn next(&mut self, load: Load) -> Result<DeviceBatch> {
        match self.loads.get(self.at) {
            Some((l, _, _)) if *l == load => {}
            other => {
                return Err(DataFusionError::Internal(format!(
                    "the out-of-core driver expected a {load:?} upload, its plan has {other:?}"
                )));
            }
        }
        let handle = match self.pending.take() {
            Some(h) => h,
            None => self.start(self.at).ok_or_else(|| DataFusionError::Internal("no upload to start".into()))?,
        };
        let dev = handle.await?;
        timeline::mark("out-of-core", || {
            format!("upload {} of {} ready ({} rows)", self.at, self.loads.len(), dev.num_rows())
        });
        self.at += 1;
        self.pending = self.start(self.at);
        Ok(dev)
    }
}

/// The output streams of an out-of-core join, as its driver sees them: each probe stream's
/// sender and metrics, `None` once its consumer has gone.
pub(super) struct Outputs {
    pub(super) targets: Vec<Option<(mpsc::Sender<Result<JoinOutput>>, Metrics)>>,
    /// Where the next unrouted batch is offered first, among the fed streams.
    pub(super) next: usize,
    /// Streams that unrouted batches go to: the first this many still reading
    /// ([`SpillSizes::outputs`], which sized the windows for that many).
    pub(super) fed: usize,
}

impl Outputs {
    /// Sends `batches` to stream `to` (dropped if its consumer has gone), or, for `None`, each to
    /// the first fed stream with room from the one after the last used (waiting for one when all
    /// are full). False when no stream reads any more.
    pub(super) async fn send(&mut self, to: Option<usize>, batches: Vec<DeviceBatch>) -> bool {
        for batch in batches {
            let mut batch = Some(batch);
            let order: Vec<usize> = match to {
                Some(i) => vec![i],
                None => {
                    let fed: Vec<usize> =
                        (0..self.targets.len()).filter(|i| self.targets[*i].is_some()).take(self.fed.max(1)).collect();
                    (0..fed.len()).map(|k| fed[(self.next + k) % fed.len()]).collect()
                }
            };
            // First a pass without waiting (unrouted only), then wait on each in turn.
            for wait in [false, true] {
                if to.is_some() && !wait {
                    continue;
                }
                for (k, &i) in order.iter().enumerate() {
                    let Some(Some((tx, m))) = self.targets.get_mut(i) else { continue };
                    let Some(b) = batch.take() else { break };
                    let rows = b.num_rows();
                    let ready = match wait {
                        true => futures::future::poll_fn(|cx| tx.poll_ready(cx)).await,
                        false => match tx.poll_ready(&mut Context::from_waker(futures::task::noop_waker_ref())) {
                            Poll::Ready(r) => r,
                            Poll::Pending => {
                                batch = Some(b);
                                continue;
                            }
                        },
                    };
                    match ready.and_then(|()| tx.start_send(Ok(JoinOutput::Device(b)))) {
                        Ok(()) => {
                            m.sent(rows);
                            self.next = self.next.wrapping_add(k + 1);
                        }
                        Err(_) => self.targets[i] = None,
                    }
                }
                if batch.is_none() {
                    break;
                }
            }
            if self.targets.iter().all(Option::is_none) {
                return false;
            }
        }
        true
    }
}

/// One batch of probe input for the out-of-core split.
pub(super) enum ProbeBatch {
    Device(DeviceBatch),
    /// Host batches joined into one chunk as they are uploaded.
    Host(Vec<RecordBatch>),
}
