//! The build side of a GPU join: its input collected (device batches from a GPU child, host
//! batches otherwise), then prepared on the device, partitioned into pinned host memory for an
//! out-of-core join, or handed to DataFusion's join when device memory runs out.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use futures::StreamExt;

use super::layout::Layout;
use super::out_of_core::OutOfCore;
use super::stream::timed_input;
use super::{Built, KeptBuild, Metrics, coalesced_input, hash_join};
use crate::columns::DeviceBatch;
use crate::columns::row_width;
use crate::config::GpuConfig;
use crate::cost::join::JoinEstimate;
use crate::device::Gpu;
use crate::error::{CudaResultExt, recoverable_on_cpu};
use crate::exec::cpu_join::CpuJoin;
use crate::exec::upload::{ChunkUploader, batch_bytes};
use crate::exec::{as_gpu_exec, blocking, download_all, onto, rows_within_limit, timeline};
use crate::join::triton::{SpillSizes, SpilledSide, fits_in_memory, memory_to_fit};
use crate::join::{JoinBuild, JoinSpec, window_bound};

/// The longest a build waits for other operators to release the device memory it would join in
/// before it is partitioned into host memory.
const BUILD_ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A join's build input, its build columns: host batches from a CPU child (as they came, not
/// concatenated), device batches from a GPU child (nothing crosses PCIe), or host batches that
/// also went up to the device as they arrived (`gpu.join.pipelined_inputs`), each partition's
/// as one device batch; the host batches stay for DataFusion's join and an out-of-core build.
pub(super) enum BuildInput {
    Host(Vec<RecordBatch>),
    Device(Vec<DeviceBatch>),
    Uploaded { host: Vec<RecordBatch>, device: Vec<DeviceBatch> },
}

impl BuildInput {
    /// The rows on the host (device batches downloaded), for the CPU.
    pub(super) async fn into_host(self) -> Result<Vec<RecordBatch>> {
        match self {
            BuildInput::Host(h) | BuildInput::Uploaded { host: h, .. } => Ok(h),
            BuildInput::Device(parts) => download_all(parts).await,
        }
    }
}

/// `input`'s batches with the build columns, read to the end, the time spent waiting for each
/// added to `metrics.input_wait_time`; with `upload`, each also goes up to the device as it
/// arrives (the time that takes, while the input waits, added to `metrics.input_stall_time`),
/// until an upload fails (device memory refused): the device batch is then `None`.
async fn read_host_partition(
    input: datafusion::execution::SendableRecordBatchStream,
    cols: Vec<usize>,
    metrics: Metrics,
    upload: Option<Arc<Gpu>>,
) -> Result<(Vec<RecordBatch>, Option<Option<DeviceBatch>>)> {
    let mut uploader =
        upload.map(|gpu| ChunkUploader::new(gpu, usize::MAX, metrics.upload_time.clone(), metrics.pack_time.clone()));
    let mut input = timed_input(Box::pin(input), &metrics, None);
    let mut batches = Vec::new();
    while let Some(b) = input.next().await.transpose()? {
        if b.num_rows() == 0 {
            continue;
        }
        let b = b.project(&cols)?;
        if let Some(u) = uploader.as_mut() {
            let _stall = metrics.input_stall_time.timer();
            if let Err(e) = u.push(b.clone()).await {
                log::debug!("a GPU join's build upload stopped ({e}): its rows go up after the last one");
                uploader = None;
            }
        }
        batches.push(b);
    }
    let device = match uploader {
        Some(mut u) => {
            let _stall = metrics.input_stall_time.timer();
            u.finish().await.ok()
        }
        None => None,
    };
    Ok((batches, device))
}

/// Reads every listed partition of `plan` at once (each on its own task, so CPU children run in
/// parallel), keeping the build columns, in partition order: device batches from a GPU child
/// (on `gpu`, copied there from another device of the set), else the host batches, which with
/// `upload` also go up to the device as they arrive ([`BuildInput::Uploaded`], when every
/// partition's upload succeeded).
pub(super) async fn collect(
    plan: &Arc<dyn ExecutionPlan>,
    partitions: std::ops::Range<usize>,
    gpu: &Arc<Gpu>,
    layout: &Arc<Layout>,
    context: &Arc<TaskContext>,
    metrics: &Metrics,
    upload: Option<Arc<Gpu>>,
) -> Result<BuildInput> {
    let failed = |e| DataFusionError::Execution(format!("GPU join: reading the build side failed: {e}"));
    // The one partition of a CoalescePartitionsExec over a GPU exec is every partition of that
    // exec: read on the device, not downloaded to be merged and uploaded again.
    let (plan, partitions) = match coalesced_input(plan) {
        Some(input) if partitions == (0..1) => (input, 0..input.output_partitioning().partition_count()),
        _ => (plan, partitions),
    };
    if let Some(child) = as_gpu_exec(plan) {
        let mut tasks = Vec::new();
        for p in partitions {
            let mut s = timed_input(onto(child.execute_device(p, Arc::clone(context))?, gpu), metrics, None);
            let layout = Arc::clone(layout);
            tasks.push(SpawnedTask::spawn(async move {
                let mut parts = Vec::new();
                while let Some(b) = s.next().await.transpose()? {
                    if b.num_rows() > 0 {
                        parts.push(b.select(&layout.build_cols, &layout.build_schema)?);
                    }
                }
                Ok::<_, DataFusionError>(parts)
            }));
        }
        let mut parts = Vec::new();
        for t in tasks {
            parts.extend(t.await.map_err(failed)??);
        }
        if parts.is_empty() {
            return Ok(BuildInput::Host(Vec::new()));
        }
        return Ok(BuildInput::Device(parts));
    }
    let mut tasks = Vec::new();
    for p in partitions {
        let s = plan.execute(p, Arc::clone(context))?;
        let job = read_host_partition(s, layout.build_cols.clone(), metrics.clone(), upload.clone());
        tasks.push(SpawnedTask::spawn(job));
    }
    let (mut batches, mut device, mut uploaded) = (Vec::new(), Vec::new(), upload.is_some());
    for t in tasks {
        let (host, dev) = t.await.map_err(failed)??;
        batches.extend(host);
        match dev {
            Some(Some(d)) => device.push(d),
            Some(None) => {}
            None => uploaded = false,
        }
    }
    Ok(match uploaded && !device.is_empty() {
        true => BuildInput::Uploaded { host: batches, device },
        false => BuildInput::Host(batches),
    })
}

/// The algorithm a build runs: the model's choice on the real build rows when the setting and
/// plan leave a choice and the model was consulted, else the plan's.
pub(super) fn runtime_spec(layout: &Layout, estimate: Option<&JoinEstimate>, build_rows: usize) -> Arc<JoinSpec> {
    let Some(e) = estimate.filter(|e| layout.candidates.len() > 1 && !e.bounded) else {
        return Arc::clone(&layout.spec);
    };
    let best = e.choose_for_build(build_rows, &layout.candidates);
    if best == layout.spec.algorithm {
        return Arc::clone(&layout.spec);
    }
    let mut spec = (*layout.spec).clone();
    spec.algorithm = best;
    Arc::new(spec)
}

/// A spec for one build: the run-time algorithm choice, and its output windows when the memory
/// limit (or an out-of-core plan) asks for windows smaller than `gpu.join.window_rows`.
pub(super) fn build_spec(
    layout: &Layout,
    estimate: Option<&JoinEstimate>,
    build_rows: usize,
    window_rows: Option<u64>,
) -> Arc<JoinSpec> {
    let spec = runtime_spec(layout, estimate, build_rows);
    match window_rows {
        Some(w) if w < spec.batch_rows => {
            let mut s = (*spec).clone();
            s.batch_rows = w;
            Arc::new(s)
        }
        _ => spec,
    }
}

/// `batches` in groups of `rows` rows (the last one shorter), a batch crossing a group's end cut
/// in two (slices share the batch's buffers).
pub(super) fn chunk_groups(batches: &[RecordBatch], rows: usize) -> Vec<Vec<RecordBatch>> {
    let rows = rows.max(1);
    let (mut groups, mut group, mut in_group) = (Vec::new(), Vec::new(), 0usize);
    for b in batches {
        let mut at = 0;
        while at < b.num_rows() {
            let n = (rows - in_group).min(b.num_rows() - at);
            group.push(b.slice(at, n));
            (at, in_group) = (at + n, in_group + n);
            if in_group == rows {
                groups.push(std::mem::take(&mut group));
                in_group = 0;
            }
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// `bytes` over `rows`, rounded up (at least 1): chunks cut at `budget / per_row` rows hold at
/// most `budget` (rounded down, rows of 1.9 bytes would make chunks of 1.9 chunks).
pub(super) fn per_row(bytes: u64, rows: usize) -> u64 {
    bytes.div_ceil(rows.max(1) as u64).max(1)
}

/// Everything a join partition's build needs.
#[derive(Clone)]
pub(super) struct BuildJob {
    pub(super) gpu: Arc<Gpu>,
    /// The `HashJoinExec` the GPU join replaces (for DataFusion's join when it falls back).
    pub(super) join: Arc<dyn ExecutionPlan>,
    pub(super) layout: Arc<Layout>,
    pub(super) estimate: Option<Arc<JoinEstimate>>,
    pub(super) cfg: GpuConfig,
    pub(super) context: Arc<TaskContext>,
    pub(super) metrics: Metrics,
    /// Output streams that may hold windows at once.
    pub(super) consumers: usize,
    /// Whether the probe streams share this build (`CollectLeft` mode).
    pub(super) consumers_share_build: bool,
    pub(super) route: bool,
    pub(super) planned_out_of_core: bool,
    pub(super) who: String,
}

impl BuildJob {
    /// This job for the same join under another layout (its sides swapped, see
    /// [`Layout::swapped`]), built for one probe stream without the plan's estimate, which was
    /// made for the planned sides.
    pub(super) fn swapped(&self, layout: Arc<Layout>) -> BuildJob {
        BuildJob {
            layout,
            estimate: None,
            consumers: 1,
            consumers_share_build: true,
            planned_out_of_core: false,
            ..self.clone()
        }
    }

    /// Collects the build side (partitions `partitions` of `left`) and prepares it: on the device
    /// when its state fits under the memory limit, else partitioned into pinned host memory for
    /// an out-of-core join whose output goes to `consumers` streams at once. In `Partitioned`
    /// mode each partition's join gets a share of the limit, and when the plan expects the join
    /// to run out of core (`planned_out_of_core`) every partition does, so that all their device
    /// work takes turns for the device's out-of-core work slots (a partition joined in memory
    /// would not). When device memory runs out on the way (and `gpu.memory.cpu_fallback` is on), the
    /// build goes to DataFusion's join instead, which then serves every probe partition.
    pub(super) async fn run(self, left: Arc<dyn ExecutionPlan>, partitions: std::ops::Range<usize>) -> Result<Built> {
        // Pipelined, host rows go up as they arrive, unless the plan already expects the build
        // to be partitioned into host memory (out of core).
        let upload = (self.cfg.pipelined_inputs && !self.planned_out_of_core).then(|| Arc::clone(&self.gpu));
        let input = collect(&left, partitions, &self.gpu, &self.layout, &self.context, &self.metrics, upload).await?;
        self.metrics.mark(&self.metrics.build_input_at);
        self.prepare(input).await
    }

    /// [`Self::run`] over the build input already collected.
    pub(super) async fn prepare(self, input: BuildInput) -> Result<Built> {
        let (rows, bytes): (usize, u64) = match &input {
            BuildInput::Host(h) | BuildInput::Uploaded { host: h, .. } => {
                (h.iter().map(RecordBatch::num_rows).sum(), h.iter().map(batch_bytes).sum())
            }
            BuildInput::Device(d) => {
                (d.iter().map(DeviceBatch::num_rows).sum(), d.iter().map(|b| b.byte_size() as u64).sum())
            }
        };
        timeline::mark(&self.who, || format!("build input of {rows} rows collected"));
        // Partitioned mode runs one join per partition at the same time: each gets its share. Of
        // the limit, only what other operators do not hold is there for this build, once the
        // table cache has given back the idle columns it would take. An operator beside it (the
        // other side of a join above, its own probe side's scans) may hold the room for a while:
        // waiting up to BUILD_ROOM_WAIT for it costs less than partitioning the build into host
        // memory, which moves it over the host link three times.
        let share = if self.consumers_share_build { 1 } else { self.consumers.max(1) as u64 };
        let need = memory_to_fit(bytes).saturating_mul(share);
        let memory = Arc::clone(self.gpu.memory());
        let available = blocking(move || Ok(memory.wait_for_room(need, BUILD_ROOM_WAIT))).await?;
        let (limit, streams) = match self.consumers_share_build {
            true => (available, self.consumers),
            false => (available / self.consumers.max(1) as u64, 1),
        };
        let spill = !fits_in_memory(bytes, limit) || (self.planned_out_of_core && !self.consumers_share_build);
        let (result, for_cpu) = if self.layout.no_spill.is_none() && spill {
            // Partitioned into host memory: device input comes back to the host first.
            let host = input.into_host().await?;
            let keep = host.clone();
            (self.spill(host, rows, bytes, limit, streams).await, BuildInput::Host(keep))
        } else {
            self.in_memory(input, rows).await
        };
        match result {
            Ok(built) => Ok(built),
            Err(e) if self.cfg.cpu_fallback && recoverable_on_cpu(&e) => {
                let host = for_cpu.into_host().await?;
                self.on_cpu(host, &e)
            }
            Err(e) => Err(e),
        }
    }

    /// DataFusion's join over the build rows `host`, for every probe partition of a shared build
    /// (or this partition's), after the GPU's `failed`.
    pub(super) fn on_cpu(&self, host: Vec<RecordBatch>, failed: &DataFusionError) -> Result<Built> {
        timeline::mark(&self.who, || format!("the build goes to the CPU after: {failed}"));
        log::debug!("a GPU join's build goes to DataFusion's join: {failed}");
        self.metrics.cpu_fallbacks.add(1);
        let probes = if self.consumers_share_build { self.consumers } else { 1 };
        let cpu = CpuJoin::new(hash_join(&self.join)?, &self.layout.sides(), host, probes)?;
        Ok(Built::OnCpu(Arc::new(cpu)))
    }

    /// Partitions the build rows `host` into pinned host memory for an out-of-core join.
    pub(super) async fn spill(
        &self,
        host: Vec<RecordBatch>,
        rows: usize,
        bytes: u64,
        limit: u64,
        streams: usize,
    ) -> Result<Built> {
        let (gpu, layout, metrics) = (&self.gpu, &self.layout, &self.metrics);
        let out_row = row_width(&layout.spec.schema).max(1);
        let sizes =
            SpillSizes::new(bytes, limit, streams, self.route, out_row, window_bound(self.cfg.join_window_rows));
        metrics.spill_partitions.add(sizes.partitions());
        // The chunks are dealt to as many partitioning passes as may run at once, so that one
        // chunk's upload overlaps another's download; their partitions are merged after.
        let chunks = chunk_groups(&host, sizes.split_rows(per_row(bytes, rows)));
        let workers = crate::device::SPLIT_WORKERS.min(chunks.len()).max(1);
        let mut dealt: Vec<Vec<Vec<RecordBatch>>> = (0..workers).map(|_| Vec::new()).collect();
        for (i, chunk) in chunks.into_iter().enumerate() {
            dealt[i % workers].push(chunk);
        }
        let mut passes = Vec::with_capacity(workers);
        for mine in dealt {
            let (gpu, layout, metrics) = (Arc::clone(gpu), Arc::clone(layout), metrics.clone());
            let slot = gpu.split_slot().await?;
            passes.push(blocking(move || -> Result<SpilledSide> {
                let _t = metrics.build_time.timer();
                let _slot = slot;
                let stream = gpu.stream();
                let mut side = SpilledSide::new(Arc::clone(&layout.build_schema), sizes.bits);
                for chunk in mine {
                    // Each chunk assembled from its batches as it is copied (no host concatenation).
                    let dev = {
                        let _u = metrics.upload_time.timer();
                        DeviceBatch::upload_concat(&gpu, &stream, &chunk)?
                    };
                    side.add(&gpu, &dev, &layout.spec.keys, &layout.spec.build_keys)?;
                }
                Ok(side)
            }));
        }
        let mut build = SpilledSide::new(Arc::clone(&layout.build_schema), sizes.bits);
        for pass in passes {
            build.absorb(&pass.await?, 0)?;
        }
        metrics.spill_bytes.add(build.bytes as usize);
        let reservation =
            MemoryConsumer::new("GpuHashJoinExec out-of-core build rows").register(self.context.memory_pool());
        reservation.try_grow(build.bytes as usize)?;
        timeline::mark(&self.who, || format!("build partitioned into pinned memory ({} bytes)", build.bytes));
        let participants = if self.consumers_share_build { self.consumers } else { 1 };
        let keep_earlier = layout.spec.emits_build_rows();
        Ok(Built::Spilled(Arc::new(OutOfCore::new(build, reservation, sizes, participants, keep_earlier))))
    }

    /// Uploads (or concatenates) the build input and builds it on the device; also returns what
    /// DataFusion's join would need if that fails (the host rows, or the device rows to download).
    pub(super) async fn in_memory(&self, input: BuildInput, rows: usize) -> (Result<Built>, BuildInput) {
        let (gpu, layout, metrics) = (&self.gpu, &self.layout, &self.metrics);
        // The output windows every probe stream may hold at once (a few each, see `probe_chunk`)
        // take at most a quarter of the memory limit: under a small limit, windows shrink.
        // A window holds its output rows and a pair of positions (16 bytes) per row.
        let in_flight = self.consumers.max(1) as u64 * crate::join::triton::WINDOWS_PER_STREAM;
        let window_rows = rows_within_limit(gpu, in_flight, row_width(&layout.spec.schema) + 16);
        let spec = build_spec(layout, self.estimate.as_deref(), rows, Some(window_rows));
        metrics.ran(spec.algorithm);
        let build_time = metrics.build_time.clone();
        let _t = build_time.timer();
        let (kept, dev, for_cpu) = match input {
            // The batches go up in groups, each assembled in the pinned staging buffers as it is
            // copied, and are concatenated on the device: no host-side concatenation of the whole
            // build (single-threaded, about 0.2 s per GiB) before the upload.
            BuildInput::Host(batches) => {
                let kept = self.keep(&batches);
                let for_cpu = BuildInput::Host(batches.clone());
                (kept, self.upload(batches).await, for_cpu)
            }
            BuildInput::Uploaded { host, device } => {
                let kept = self.keep(&host);
                let dev = match self.concat(device).await {
                    Ok((dev, _)) => dev,
                    Err(e) => Err(e),
                };
                (kept, dev, BuildInput::Host(host))
            }
            BuildInput::Device(parts) => {
                match self.concat(parts).await {
                    // The concatenated rows are the build's: a copy for the CPU costs nothing.
                    Ok((Ok(dev), _parts)) => (None, Ok(dev.clone()), BuildInput::Device(vec![dev])),
                    Ok((Err(e), parts)) => (None, Err(e), BuildInput::Device(parts)),
                    Err(e) => return (Err(e), BuildInput::Host(Vec::new())),
                }
            }
        };
        let dev = match dev {
            Ok(dev) => dev,
            Err(e) => return (Err(e), for_cpu),
        };
        let (gpu, metrics, who) = (Arc::clone(gpu), metrics.clone(), self.who.clone());
        let built = blocking(move || {
            // The build continues on the stream its input was made on.
            let stream = Arc::clone(dev.stream());
            timeline::mark(&who, || format!("build input uploaded; building with {}", spec.algorithm));
            let build = JoinBuild::new(Arc::clone(&gpu), &stream, spec, dev)?;
            metrics.add_phases(&build.times);
            Ok(Built::Memory(Arc::new(build), kept))
        })
        .await;
        (built, for_cpu)
    }

    /// The host build rows kept for DataFusion's join should a probe partition's device work
    /// fail: only where a probe partition could use them (see `PartitionRun::probe`), not for a
    /// shared build whose build rows are decided at the end.
    fn keep(&self, host: &[RecordBatch]) -> Option<Arc<KeptBuild>> {
        let usable = !(self.consumers_share_build && self.layout.spec.emits_build_rows());
        match self.cfg.cpu_fallback && usable {
            true => KeptBuild::keep(host, self.context.memory_pool()),
            false => None,
        }
    }

    /// The device batches `parts` as one, on a stream of its own once they are all there; also
    /// gives `parts` back.
    async fn concat(&self, parts: Vec<DeviceBatch>) -> Result<(Result<DeviceBatch>, Vec<DeviceBatch>)> {
        let (gpu, schema) = (Arc::clone(&self.gpu), Arc::clone(&self.layout.build_schema));
        blocking(move || {
            let stream = gpu.stream();
            let dev = DeviceBatch::concat(&gpu, &stream, schema, &parts).and_then(|dev| {
                // The build runs on its own stream: the concatenation (or the one part) must be done.
                dev.stream().synchronize().gpu("waiting for the build input")?;
                Ok(dev)
            });
            Ok((dev, parts))
        })
        .await
    }

    /// The host build rows on the device, uploaded in groups (see [`ChunkUploader`]).
    pub(super) async fn upload(&self, batches: Vec<RecordBatch>) -> Result<DeviceBatch> {
        let gpu = &self.gpu;
        let mut uploader = ChunkUploader::new(
            Arc::clone(gpu),
            usize::MAX,
            self.metrics.upload_time.clone(),
            self.metrics.pack_time.clone(),
        );
        for b in batches {
            if uploader.push(b).await?.is_some() {
                return Err(DataFusionError::Internal("a build upload split into chunks".into()));
            }
        }
        match uploader.finish().await? {
            Some(dev) => Ok(dev),
            None => {
                let (gpu, schema) = (Arc::clone(gpu), Arc::clone(&self.layout.build_schema));
                blocking(move || DeviceBatch::upload(&gpu, &gpu.stream(), &RecordBatch::new_empty(schema))).await
            }
        }
    }
}
