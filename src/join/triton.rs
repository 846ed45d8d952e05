//! The out-of-core join of Lutz et al. 2022 (Triton join), adapted to PCIe: when the build side's state
//! would not fit under `gpu.memory.limit`, both sides are radix-partitioned on the GPU by the top
//! bits of their key words and the partitions are kept in pinned host memory; then each
//! partition's build rows come back to the device, are prepared by the in-memory algorithm
//! ([`super::JoinBuild`]), and that partition's probe rows stream through them in groups.
//!
//! Equal keys fall in the same partition on both sides (the key words are the join's own), so
//! every join type is answered partition by partition: a build row is decided (matched or not)
//! within its partition. Rows whose key takes no part in matching (a NULL with NULL equals
//! nothing) stay in partition 0, where they come out as the join type asks. The in-memory PHJ
//! partitions on the low bits of the same words, so the two levels do not collide.
//!
//! Sizes come from the limit ([`SpillSizes`]): partitions small enough that one build state
//! takes an eighth of it (a quarter when skewed); chunks sized so that the partitioning passes'
//! working memory takes three quarters; probe groups of a twelfth in input, one joined while the
//! next is copied up; output windows such that the windows the consumers may hold stay within
//! three eighths, unrouted output going to fewer streams rather than into windows of fewer than
//! [`WINDOW_TARGET_ROWS`] rows. Every step has a fixed cost (launches, waits), so the pieces are
//! as large as the limit allows. A chunk is sorted by partition on the device and downloaded
//! whole into the pinned pool; a partition is uploaded from its row ranges of every chunk
//! straight from there (no staging copy).
//!
//! The probe streams of a shared build (`CollectLeft`) each partition their own input, then meet
//! ([`Meeting`]): the last to arrive drives the join for all of them (for every stream started,
//! when a consumer drains its partitions one after another: see [`Meeting`]), one partition after
//! another, probing each group of a partition's pieces once whatever streams they came from, and
//! sends every output window to a stream that is still reading (to the stream the rows came from
//! when the join's output partitioning is the probe side's). A stream's consumer that stops
//! early only loses its own output.
//!
//! Limit: one probe group's output is materialized at once, so a key whose matches multiply past
//! the limit (NULL = NULL over many NULL keys, hot keys on both sides) fails with a memory-limit
//! error instead of streaming. `DFG_OOC_TRACE=1` prints every step's time and the device memory
//! in use.
//!
//! Differences from the paper: the paper's first pass writes to host memory from the kernel
//! through software write-combining buffers; here each chunk is sorted by partition on the device
//! and copied by the DMA engine, which moves the same bytes over the link once.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::keys::{KeyPlan, prepare_keys, row_digits};
use super::materialize::{GatherSpec, gather_columns};
use crate::columns::concat::{host_range_bytes, upload_row_ranges};
use crate::columns::{DeviceBatch, DeviceColumn, HostColumn, download_columns};
use crate::device::Gpu;
use crate::error::{Result, gpu_error};
use crate::primitives::radix::{KeyWidth, ValueWidth, boundaries, radix_sort_pairs};
use crate::primitives::select::iota;

/// Step timings on stderr when DFG_OOC_TRACE is set (profiling aid; each step waits for the
/// device so that its time is its own).
pub struct Trace {
    /// The budget to report and the stream to wait for, when tracing is on.
    on: Option<(Arc<crate::device::MemoryBudget>, Arc<CudaStream>)>,
    at: std::time::Instant,
    steps: Vec<(&'static str, f64)>,
}

impl Trace {
    pub fn new(gpu: &Gpu, stream: &Arc<CudaStream>) -> Self {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *ON.get_or_init(|| std::env::var_os("DFG_OOC_TRACE").is_some());
        let on = on.then(|| (Arc::clone(gpu.memory()), Arc::clone(stream)));
        Trace { on, at: std::time::Instant::now(), steps: Vec::new() }
    }

    pub fn step(&mut self, name: &'static str) {
        let Some((_, stream)) = &self.on else { return };
        let _ = stream.synchronize();
        self.steps.push((name, self.at.elapsed().as_secs_f64() * 1e3));
        self.at = std::time::Instant::now();
    }

    /// Adds a time measured elsewhere (a phase of the in-memory join) to the printed steps.
    pub fn note(&mut self, name: &'static str, d: std::time::Duration) {
        if self.on.is_some() {
            self.steps.push((name, d.as_secs_f64() * 1e3));
        }
    }

    pub fn print(&self, what: &str) {
        if let Some((memory, _)) = &self.on {
            let steps: Vec<String> = self.steps.iter().map(|(n, ms)| format!("{n}={ms:.2}")).collect();
            eprintln!("ooc {what}: {} mem={}/{}", steps.join(" "), memory.used(), memory.limit());
        }
    }
}

/// Device memory a GPU build takes per byte of build input: the uploaded columns, their packed
/// keys, the hash table or sorted copy, and the gathered build columns of an output chunk. A
/// deliberately generous factor (the plan-time memory check uses it too): erring high keeps a
/// join on the CPU or out of core, erring low makes it run out of memory at run time.
pub const STATE_FACTOR: u64 = 3;
/// Most partition bits: 4096 partitions.
pub const MAX_BITS: u32 = 12;

/// Whether a build input of `build_bytes` joins in memory under `limit` bytes: its state may take
/// half the limit, the rest is for probe chunks and output.
pub fn fits_in_memory(build_bytes: u64, limit: u64) -> bool {
    build_bytes.saturating_mul(STATE_FACTOR) <= limit / 2
}

/// The least limit under which a build input of `build_bytes` joins in memory
/// ([`fits_in_memory`]).
pub fn memory_to_fit(build_bytes: u64) -> u64 {
    build_bytes.saturating_mul(STATE_FACTOR).saturating_mul(2)
}

/// Output windows a stream of an out-of-core join may hold at once: two buffered in its channel,
/// one parked with the driver's sender (its only sender that sends while the driver runs), and
/// one being read.
pub const WINDOWS_PER_STREAM: u64 = 4;
/// Rows an output window should have at least: every window costs a few launches and
/// allocations (about 0.1 ms on an H100 whatever its size), so under a tight limit unrouted
/// output goes to fewer streams rather than into smaller windows.
pub const WINDOW_TARGET_ROWS: u64 = 1 << 19;

/// How an out-of-core join divides its work, from the memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillSizes {
    /// Partition bits: 2^bits partitions.
    pub bits: u32,
    /// Device bytes one partitioning pass may use: the passes
    /// ([`crate::device::SPLIT_WORKERS`]) share three quarters of the limit.
    pub split_bytes: u64,
    /// Most probe input bytes joined at once (a twelfth of the limit): with its working memory,
    /// and the next group being copied up, about a quarter of the limit.
    pub group_bytes: u64,
    /// Most build input bytes prepared at once (a quarter of the limit in state); a partition
    /// over this (skew) is built in chunks.
    pub build_bytes: u64,
    /// Pairs per output window.
    pub window_rows: u64,
    /// Output streams that unrouted windows go to (every stream when routed).
    pub outputs: usize,
}

impl SpillSizes {
    /// Sizes for a build input of `build_bytes` under `limit`, with `streams` output streams
    /// (all fed when `route`, each output row going to the stream its probe row came from) and
    /// output rows of `out_row_bytes`.
    pub fn new(build_bytes: u64, limit: u64, streams: usize, route: bool, out_row_bytes: u64, batch_rows: u64) -> Self {
        let eighth = (limit / 8).max(1);
        let state = build_bytes.saturating_mul(STATE_FACTOR);
        // Partitions of an eighth of the limit in state on average, up to a quarter when skewed.
        let parts = state.div_ceil(eighth).max(2);
        let bits = (64 - (parts - 1).leading_zeros()).min(MAX_BITS);
        // Windows share three eighths of the limit: those the fed streams may hold and three
        // more being made. A build state (at most a quarter), a probe group with the next one
        // (about a quarter) and the windows stay within the limit. Unrouted output goes to as
        // many streams as leave windows of WINDOW_TARGET_ROWS rows.
        let out_row = out_row_bytes.max(1);
        let windows = 3 * eighth;
        let streams = streams.max(1);
        let outputs = match route {
            true => streams,
            false => {
                let target = out_row * WINDOW_TARGET_ROWS.min(batch_rows.max(1));
                let fit = (windows / target).saturating_sub(3) / WINDOWS_PER_STREAM;
                (fit as usize).clamp(1, streams)
            }
        };
        let window_bytes = windows / (WINDOWS_PER_STREAM * outputs as u64 + 3);
        let window_rows = (window_bytes / out_row).clamp(64, batch_rows.max(64));
        SpillSizes {
            bits,
            split_bytes: (3 * (limit / 4) / crate::device::SPLIT_WORKERS as u64).max(1),
            group_bytes: (2 * (eighth / STATE_FACTOR)).max(1),
            build_bytes: (2 * eighth / STATE_FACTOR).max(1),
            window_rows,
            outputs,
        }
    }

    pub fn partitions(&self) -> usize {
        1 << self.bits
    }

    /// Rows per chunk that one partitioning pass takes for input rows of `row_bytes`: its
    /// device memory peaks either while sorting (the input, the rows' partition numbers, row
    /// ids, their sorted copies and the prepared keys: at most 32 bytes a row) or while
    /// gathering (the input, its reordered copy and the row ids).
    pub fn split_rows(&self, row_bytes: u64) -> usize {
        let working = (row_bytes + 32).max(2 * row_bytes + 8);
        (self.split_bytes / working).max(64) as usize
    }
}

/// One chunk of a side, downloaded to pinned host memory with its rows in partition order.
#[derive(Debug, Clone)]
struct Chunk {
    columns: Vec<HostColumn>,
}

/// The rows of one partition in one chunk.
#[derive(Debug, Clone)]
struct Piece {
    chunk: usize,
    rows: Range<usize>,
    bytes: u64,
    /// The probe stream whose input the rows came from (see [`SpilledSide::absorb`]).
    origin: usize,
}

/// Consecutive pieces of one partition joined at once, and the stream they came from (that of
/// the first piece; every piece's when the groups were made by origin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub pieces: Range<usize>,
    pub origin: usize,
}

/// One side of an out-of-core join: its rows in chunks in pinned host memory, each chunk sorted
/// by partition, and for each partition the row range it holds in every chunk.
#[derive(Debug)]
pub struct SpilledSide {
    schema: SchemaRef,
    bits: u32,
    chunks: Vec<Chunk>,
    parts: Vec<Vec<Piece>>,
    /// Rows and bytes held.
    pub rows: u64,
    pub bytes: u64,
}

impl SpilledSide {
    pub fn new(schema: SchemaRef, bits: u32) -> Self {
        SpilledSide {
            schema,
            bits,
            chunks: Vec::new(),
            parts: (0..1usize << bits).map(|_| Vec::new()).collect(),
            rows: 0,
            bytes: 0,
        }
    }

    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// Partitions `batch` (on its stream) by the keys in columns `key_cols` under `plan`: sorts
    /// its rows by partition on the device and downloads them to pinned host memory in one pass
    /// (one gather, one download, whatever the number of partitions).
    pub fn add(&mut self, gpu: &Arc<Gpu>, batch: &DeviceBatch, plan: &KeyPlan, key_cols: &[usize]) -> Result<()> {
        let stream = batch.stream();
        let rows = batch.num_rows() as u64;
        if rows == 0 {
            return Ok(());
        }
        if rows > u32::MAX as u64 {
            return Err(gpu_error(format!("an out-of-core chunk of {rows} rows: at most 2^32 - 1")));
        }
        let mut trace = Trace::new(gpu, stream);
        trace.step("wait");
        let part = if self.bits > 0 {
            let cols = super::key_columns(batch, key_cols)?;
            let keys = prepare_keys(gpu, stream, plan, &cols, rows)?;
            row_digits(gpu, stream, &keys, plan.encoding.width(), self.bits)?
        } else {
            gpu.alloc_filled(stream, rows as usize * 4, 0, "out-of-core partition of each row")?
        };
        trace.step("keys");
        let ids = iota(gpu, stream, rows)?;
        let (sorted, ids) =
            radix_sort_pairs(gpu, stream, part, ids, rows, KeyWidth::U32, ValueWidth::U32, 0, self.bits)?;
        trace.step("sort");
        let parts = self.parts.len();
        // Partition p spans [bounds[p], bounds[p + 1]) of the rows sorted by partition number.
        let bounds = boundaries(gpu, stream, &sorted, rows, self.bits, KeyWidth::U32)?;
        drop(sorted);
        let specs = batch
            .columns()
            .iter()
            .map(|c| GatherSpec::Rows { col: c.as_ref(), rows: &ids, may_be_null: false })
            .collect();
        let cols = gather_columns(gpu, stream, specs, rows)?;
        drop(ids);
        trace.step("gather");
        let refs: Vec<&DeviceColumn> = cols.iter().collect();
        let columns = download_columns(gpu, stream, &refs)?;
        drop(cols);
        trace.step("download");
        let bounds = gpu.read::<u32>(stream, &bounds, 0, parts + 1)?;
        trace.step("bounds");
        trace.print(&format!("add {rows} rows"));
        let chunk = self.chunks.len();
        for p in 0..parts {
            let r = bounds[p] as usize..bounds[p + 1] as usize;
            if r.start > r.end || r.end > rows as usize {
                return Err(gpu_error(format!("out-of-core partition {p} spans rows {r:?} of {rows}")));
            }
            if r.is_empty() {
                continue;
            }
            let bytes = columns.iter().map(|c| host_range_bytes(c, &r)).sum();
            self.bytes += bytes;
            self.parts[p].push(Piece { chunk, rows: r, bytes, origin: 0 });
        }
        self.rows += rows;
        self.chunks.push(Chunk { columns });
        Ok(())
    }

    /// Rows in pieces `range` of partition `p`.
    pub fn group_rows(&self, p: usize, range: Range<usize>) -> u64 {
        self.parts.get(p).and_then(|v| v.get(range)).map_or(0, |v| v.iter().map(|x| x.rows.len() as u64).sum())
    }

    /// Adds `other`'s chunks to this side (sharing their buffers), its pieces marked as coming from stream `origin`
    /// (each partition's pieces stay in the order the sides were absorbed).
    pub fn absorb(&mut self, other: &SpilledSide, origin: usize) -> Result<()> {
        if other.bits != self.bits || other.schema != self.schema {
            return Err(gpu_error("out-of-core sides of different partitionings cannot be merged"));
        }
        let base = self.chunks.len();
        // The chunks' buffers are shared, not copied.
        self.chunks.extend(other.chunks.iter().cloned());
        for (mine, theirs) in self.parts.iter_mut().zip(&other.parts) {
            mine.extend(theirs.iter().map(|x| Piece { chunk: base + x.chunk, origin, ..x.clone() }));
        }
        self.rows += other.rows;
        self.bytes += other.bytes;
        Ok(())
    }

    /// Partition `p`'s pieces in groups of at most `max_bytes` each (or one piece), of about
    /// equal size (no small last group: each costs a step); with `by_origin`, a group holds the
    /// pieces of one stream only.
    pub fn groups(&self, p: usize, max_bytes: u64, by_origin: bool) -> Vec<Group> {
        let Some(pieces) = self.parts.get(p) else { return Vec::new() };
        let total: u64 = pieces.iter().map(|x| x.bytes).sum();
        let max_bytes = max_bytes.max(1);
        let target = total.div_ceil(total.div_ceil(max_bytes).max(1));
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0usize, 0u64);
        for (i, piece) in pieces.iter().enumerate() {
            let other_origin = by_origin && pieces[start].origin != piece.origin;
            if i > start && (bytes + piece.bytes > max_bytes || bytes >= target || other_origin) {
                out.push(Group { pieces: start..i, origin: pieces[start].origin });
                start = i;
                bytes = 0;
            }
            bytes += piece.bytes;
        }
        if start < pieces.len() {
            out.push(Group { pieces: start..pieces.len(), origin: pieces[start].origin });
        }
        out
    }

    /// Pieces `range` of partition `p`, uploaded one after another into one batch on `stream`
    /// (an empty batch for no pieces).
    pub fn restore(
        &self,
        gpu: &Arc<Gpu>,
        stream: &Arc<CudaStream>,
        p: usize,
        range: Range<usize>,
    ) -> Result<DeviceBatch> {
        let pieces = self
            .parts
            .get(p)
            .and_then(|v| v.get(range))
            .ok_or_else(|| gpu_error(format!("out-of-core partition {p} has no such pieces")))?;
        let rows: usize = pieces.iter().map(|x| x.rows.len()).sum();
        if rows == 0 {
            return DeviceBatch::upload(gpu, stream, &RecordBatch::new_empty(Arc::clone(&self.schema)));
        }
        let mut trace = Trace::new(gpu, stream);
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for i in 0..self.schema.fields().len() {
            let parts = pieces
                .iter()
                .map(|x| {
                    let col = self.chunks.get(x.chunk).and_then(|c| c.columns.get(i));
                    col.map(|c| (c, x.rows.clone())).ok_or_else(|| gpu_error("an out-of-core piece without its chunk"))
                })
                .collect::<Result<Vec<_>>>()?;
            columns.push(Arc::new(upload_row_ranges(gpu, stream, &parts)?));
        }
        trace.step("upload");
        trace.print(&format!("restore {rows} rows from {} pieces", pieces.len()));
        DeviceBatch::try_new(Arc::clone(&self.schema), columns, rows, Arc::clone(gpu), Arc::clone(stream))
    }
}

/// Where the probe streams of an out-of-core join meet. Each stream partitions its own probe
/// input into host memory and hands it over ([`Meeting::arrive`]); once every stream executed so
/// far has arrived, the last of them gets their entries (a [`Round`]) and drives the join,
/// partition by partition, for all of them (one step per partition and probe group, not one per
/// stream), while the others wait for that round's end.
///
/// A consumer that polls every partition at once (DataFusion's operators do) gives one round of
/// every stream. One that executes and drains its partitions one after another (or a worker that
/// runs a few of them) gives several rounds: a stream never waits for a partition nobody has
/// executed. A join that emits build rows decided by every probe row (left, full, left semi and
/// anti joins with the build on the left) emits them in the last round only, which also probes
/// the rows of earlier rounds again, its output of them discarded, to decide them: the meeting
/// keeps each earlier entry's [`Keep::keep`] for it.
pub struct Meeting<T> {
    state: std::sync::Mutex<MeetingState<T>>,
    progress: tokio::sync::watch::Sender<Progress>,
    /// Whether the last round gets the entries of the earlier ones.
    keep_earlier: bool,
    /// The driving tasks, kept here so that they outlive the streams that started them.
    drivers: std::sync::Mutex<Vec<datafusion::common::runtime::SpawnedTask<()>>>,
}

impl<T> std::fmt::Debug for Meeting<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meeting").field("progress", &*self.progress.borrow()).finish()
    }
}

/// What an entry leaves with the meeting for the last round when its own round is driven: the
/// rows it handed over, without what would keep its stream open.
pub trait Keep {
    fn keep(&self) -> Self;
}

struct MeetingState<T> {
    /// Streams in all.
    expected: usize,
    /// Streams that arrived so far, in every round.
    arrived: usize,
    /// Rounds handed to drivers so far; the open round is numbered this.
    rounds: usize,
    /// Entries of the open round.
    entries: Vec<T>,
    /// What entries of earlier rounds kept for the last one.
    earlier: Vec<T>,
}

/// The entries one driver joins.
#[derive(Debug, PartialEq, Eq)]
pub struct Round<T> {
    pub number: usize,
    pub entries: Vec<T>,
    /// What the entries of earlier rounds kept (the last round of a meeting that keeps them).
    pub earlier: Vec<T>,
    /// Whether every stream has arrived.
    pub last: bool,
}

/// What [`Meeting::arrive`] gives a stream: a round to drive, or the number of the round whose
/// end it waits for.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrived<T> {
    Drive(Round<T>),
    Wait(usize),
}

/// The rounds that ended, or why the join failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    finished: Vec<usize>,
    /// Why, and whether device memory ran out (the error stays a `ResourcesExhausted` one for
    /// every stream, which the execs may recover from).
    failed: Option<(String, bool)>,
}

/// `why` as the error a failed join gives its streams.
fn failed(why: String, memory: bool) -> datafusion::error::DataFusionError {
    match memory {
        true => crate::error::device_memory_error(why),
        false => gpu_error(why),
    }
}

impl<T: Keep> Meeting<T> {
    /// A meeting of `participants` streams; with `keep_earlier`, the last round gets what the
    /// entries of earlier rounds kept.
    pub fn new(participants: usize, keep_earlier: bool) -> Arc<Self> {
        Arc::new(Meeting {
            state: std::sync::Mutex::new(MeetingState {
                expected: participants.max(1),
                arrived: 0,
                rounds: 0,
                entries: Vec::new(),
                earlier: Vec::new(),
            }),
            progress: tokio::sync::watch::Sender::new(Progress::default()),
            keep_earlier,
            drivers: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Hands over one stream's `entry`, when `executed` streams have been started: the open
    /// round is driven by this stream when every stream started has arrived.
    pub fn arrive(&self, entry: T, executed: usize) -> Result<Arrived<T>> {
        if let Some((why, memory)) = self.progress.borrow().failed.clone() {
            return Err(failed(format!("another probe stream of this out-of-core join failed: {why}"), memory));
        }
        let mut s = self.state.lock().map_err(|_| gpu_error("the out-of-core join's meeting lock is poisoned"))?;
        s.entries.push(entry);
        s.arrived += 1;
        let number = s.rounds;
        let last = s.arrived >= s.expected;
        if !last && s.arrived < executed.min(s.expected) {
            return Ok(Arrived::Wait(number));
        }
        s.rounds += 1;
        let entries = std::mem::take(&mut s.entries);
        let earlier = match (last, self.keep_earlier) {
            (true, _) => std::mem::take(&mut s.earlier),
            (false, true) => {
                s.earlier.extend(entries.iter().map(Keep::keep));
                Vec::new()
            }
            (false, false) => Vec::new(),
        };
        Ok(Arrived::Drive(Round { number, entries, earlier, last }))
    }
}

impl<T> Meeting<T> {
    /// Keeps a task driving a round (it stops when this meeting is dropped).
    pub fn add_driver(&self, task: datafusion::common::runtime::SpawnedTask<()>) {
        if let Ok(mut d) = self.drivers.lock() {
            d.push(task);
        }
    }

    /// Ends round `round`: its streams return.
    pub fn finish(&self, round: usize) {
        self.progress.send_modify(|p| p.finished.push(round));
    }

    fn fail_for(&self, why: String, memory: bool) {
        self.progress.send_if_modified(|p| {
            let first = p.failed.is_none();
            if first {
                p.failed = Some((why, memory));
            }
            first
        });
    }

    /// Stops every stream, of every round, with `why` (the first failure stays).
    pub fn fail(&self, why: &str) {
        self.fail_for(why.to_string(), false);
    }

    /// Stops every stream with the error `e`.
    pub fn fail_with(&self, e: &datafusion::error::DataFusionError) {
        self.fail_for(e.to_string(), crate::error::recoverable_on_cpu(e));
    }

    /// Waits for the end of round `round`: an error when the join failed first.
    pub async fn wait(&self, round: usize) -> Result<()> {
        let mut rx = self.progress.subscribe();
        let progress = rx
            .wait_for(|p| p.failed.is_some() || p.finished.contains(&round))
            .await
            .map_err(|_| gpu_error("the out-of-core join stopped without an outcome"))?
            .clone();
        match progress.failed {
            Some((why, memory)) if !progress.finished.contains(&round) => {
                Err(failed(format!("the out-of-core join failed: {why}"), memory))
            }
            _ => Ok(()),
        }
    }
}

/// A stream's place in a [`Meeting`] until it arrives: dropped before that (its consumer
/// stopped, or its split failed), it stops the join for every stream, since its probe rows
/// would be missing from the answer.
pub struct Arrival<T> {
    meeting: Arc<Meeting<T>>,
    arrived: bool,
}

impl<T: Keep> Arrival<T> {
    pub fn new(meeting: &Arc<Meeting<T>>) -> Self {
        Arrival { meeting: Arc::clone(meeting), arrived: false }
    }

    /// Hands over `entry` (see [`Meeting::arrive`]).
    pub fn arrive(mut self, entry: T, executed: usize) -> Result<Arrived<T>> {
        self.arrived = true;
        self.meeting.arrive(entry, executed)
    }
}

impl<T> Drop for Arrival<T> {
    fn drop(&mut self) {
        if !self.arrived {
            self.meeting.fail("a probe stream stopped before its input was partitioned");
        }
    }
}

/// Ends a [`Meeting`] as failed if the task driving round `.1` stops without finishing it (a
/// panic, or the task dropped), so that no stream waits forever.
pub struct DriverGuard<T>(pub Arc<Meeting<T>>, pub usize);

impl<T> Drop for DriverGuard<T> {
    fn drop(&mut self) {
        if !self.0.progress.borrow().finished.contains(&self.1) {
            self.0.fail("the out-of-core join's driving task stopped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Keep for u32 {
        fn keep(&self) -> Self {
            *self + 100
        }
    }

    #[tokio::test]
    async fn meeting_hands_every_entry_to_the_last_arrival() {
        let meeting = Meeting::<u32>::new(3, false);
        assert_eq!(Arrival::new(&meeting).arrive(1, 3).unwrap(), Arrived::Wait(0));
        assert_eq!(Arrival::new(&meeting).arrive(2, 3).unwrap(), Arrived::Wait(0));
        let m = Arc::clone(&meeting);
        let waiter = tokio::spawn(async move { m.wait(0).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "waits for the driver");
        let round = Round { number: 0, entries: vec![1, 2, 3], earlier: vec![], last: true };
        assert_eq!(Arrival::new(&meeting).arrive(3, 3).unwrap(), Arrived::Drive(round));
        {
            let _guard = DriverGuard(Arc::clone(&meeting), 0);
            meeting.finish(0);
        } // the round finished before the guard went: no failure
        waiter.await.unwrap().unwrap();
        meeting.wait(0).await.unwrap();

        // A stream that stops before arriving stops the others.
        let meeting = Meeting::<u32>::new(2, false);
        assert_eq!(Arrival::new(&meeting).arrive(1, 2).unwrap(), Arrived::Wait(0));
        drop(Arrival::new(&meeting));
        assert!(meeting.wait(0).await.unwrap_err().to_string().contains("stopped before"));
        assert!(Arrival::new(&meeting).arrive(2, 2).is_err());

        // A driver that stops without finishing its round fails the join.
        let meeting = Meeting::<u32>::new(1, false);
        assert!(matches!(Arrival::new(&meeting).arrive(1, 1).unwrap(), Arrived::Drive(_)));
        drop(DriverGuard(Arc::clone(&meeting), 0));
        assert!(meeting.wait(0).await.unwrap_err().to_string().contains("driving task stopped"));
    }

    /// Streams executed one after another (each drained before the next starts) never wait for
    /// one not started: each forms a round of its own, and the last round gets what the earlier
    /// ones kept.
    #[tokio::test]
    async fn meeting_rounds_for_streams_executed_one_after_another() {
        let meeting = Meeting::<u32>::new(3, true);
        let round = |number, entries: Vec<u32>, earlier: Vec<u32>, last| {
            Arrived::Drive(Round { number, entries, earlier, last })
        };
        assert_eq!(Arrival::new(&meeting).arrive(1, 1).unwrap(), round(0, vec![1], vec![], false));
        meeting.finish(0);
        meeting.wait(0).await.unwrap();
        // Two started together: the first waits for the second.
        assert_eq!(Arrival::new(&meeting).arrive(2, 3).unwrap(), Arrived::Wait(1));
        let m = Arc::clone(&meeting);
        let waiter = tokio::spawn(async move { m.wait(1).await });
        assert_eq!(Arrival::new(&meeting).arrive(3, 3).unwrap(), round(1, vec![2, 3], vec![101], true));
        meeting.finish(1);
        waiter.await.unwrap().unwrap();
        // Without keeping, the last round gets its own entries only.
        let meeting = Meeting::<u32>::new(2, false);
        assert_eq!(Arrival::new(&meeting).arrive(1, 1).unwrap(), round(0, vec![1], vec![], false));
        assert_eq!(Arrival::new(&meeting).arrive(2, 2).unwrap(), round(1, vec![2], vec![], true));
        // A failure stops the rounds not yet finished, not those that were.
        meeting.finish(0);
        meeting.fail("test");
        meeting.wait(0).await.unwrap();
        assert!(meeting.wait(1).await.is_err());
    }

    #[test]
    fn groups_split_by_size_and_origin() {
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::empty());
        let side = |origins: &[usize]| {
            let mut s = SpilledSide::new(Arc::clone(&schema), 1);
            s.chunks = origins.iter().map(|_| Chunk { columns: Vec::new() }).collect();
            s.parts[1] = origins
                .iter()
                .enumerate()
                .map(|(i, &origin)| Piece { chunk: i, rows: 0..10, bytes: 10, origin })
                .collect();
            s
        };
        let s = side(&[0, 0, 1, 1, 1]);
        let ranges = |g: Vec<Group>| g.into_iter().map(|g| (g.pieces, g.origin)).collect::<Vec<_>>();
        assert_eq!(ranges(s.groups(1, 100, false)), vec![(0..5, 0)]);
        assert_eq!(ranges(s.groups(1, 100, true)), vec![(0..2, 0), (2..5, 1)]);
        assert_eq!(ranges(s.groups(1, 20, true)), vec![(0..2, 0), (2..4, 1), (4..5, 1)]);
        assert_eq!(ranges(s.groups(1, 5, false)).len(), 5, "a piece over the size is a group of its own");
        // Groups of about equal size: 30 + 20 bytes, not 40 + 10.
        assert_eq!(ranges(s.groups(1, 40, false)), vec![(0..3, 0), (3..5, 1)]);
        assert!(s.groups(0, 100, false).is_empty());
        // Absorbed sides keep their pieces' order and take the origin they are given.
        let mut merged = side(&[0]);
        merged.absorb(&side(&[0, 0]), 3).unwrap();
        assert_eq!(ranges(merged.groups(1, 100, true)), vec![(0..1, 0), (1..3, 3)]);
        assert_eq!(merged.parts[1][2].chunk, 1 + 1, "chunks renumbered after the ones held");
        assert_eq!(merged.chunks.len(), 3);
    }

    #[test]
    fn sizes_follow_the_limit() {
        // 1 GiB of build input under a 4 GiB limit: state 3 GiB, partitions of 512 MiB.
        let s = SpillSizes::new(1 << 30, 4 << 30, 1, false, 16, 1 << 22);
        assert_eq!(s.partitions(), 8);
        assert_eq!(s.group_bytes, 2 * ((512 << 20) / 3));
        // Passes share three quarters of the limit; 8-byte rows take 40 bytes a row in one.
        assert_eq!(s.split_bytes, (3 << 30) / crate::device::SPLIT_WORKERS as u64);
        assert_eq!(s.split_rows(8), (s.split_bytes / 40) as usize);
        assert_eq!(s.split_rows(100), (s.split_bytes / 208) as usize);
        assert!(!fits_in_memory(1 << 30, 4 << 30));
        assert!(fits_in_memory(600 << 20, 4 << 30));
        // Small limits still give at least two partitions and windows of 64 rows.
        let s = SpillSizes::new(100, 1 << 20, 16, false, 1000, 1 << 22);
        assert_eq!(s.partitions(), 2);
        assert_eq!(s.window_rows, 64);
        assert_eq!(s.outputs, 1);
        // Partition bits are capped.
        assert_eq!(SpillSizes::new(1 << 40, 1 << 20, 1, false, 8, 1 << 22).bits, MAX_BITS);
    }

    #[test]
    fn windows_go_to_fewer_streams_under_a_tight_limit() {
        // 384 MiB: windows share 144 MiB. Unrouted output of 16-byte rows goes to as many
        // streams as leave windows of at least 2^19 rows (8 MiB): 144/8 = 18, less 3 being
        // made, over 4 a stream: 3 streams, windows of 144 MiB / 15.
        let s = SpillSizes::new(1 << 30, 384 << 20, 16, false, 16, 1 << 22);
        assert_eq!(s.outputs, 3);
        assert_eq!(s.window_rows, ((144u64 << 20) / 15) / 16);
        assert!(s.window_rows >= WINDOW_TARGET_ROWS);
        // Routed output feeds every stream: smaller windows.
        let r = SpillSizes::new(1 << 30, 384 << 20, 16, true, 16, 1 << 22);
        assert_eq!(r.outputs, 16);
        assert_eq!(r.window_rows, ((144u64 << 20) / 67) / 16);
        // A large limit feeds every stream with windows of at most batch_rows.
        let l = SpillSizes::new(1 << 36, 64 << 30, 16, false, 16, 1 << 22);
        assert_eq!(l.outputs, 16);
        assert_eq!(l.window_rows, 1 << 22);
        // The windows the fed streams may hold, and three being made, stay within 3/8.
        for (s, limit) in [(s, 384u64 << 20), (r, 384 << 20), (l, 64 << 30)] {
            let held = (WINDOWS_PER_STREAM * s.outputs as u64 + 3) * s.window_rows * 16;
            assert!(held <= 3 * (limit / 8), "{s:?}");
        }
    }

    #[test]
    fn windows_hold_a_floor_of_rows_unless_the_limit_asks_for_fewer() {
        use crate::join::{MIN_WINDOW_ROWS, window_bound};
        // gpu.batch_rows below the floor gives windows of the floor; above it, of batch_rows.
        assert_eq!(window_bound(100), MIN_WINDOW_ROWS);
        assert_eq!(window_bound(0), MIN_WINDOW_ROWS);
        assert_eq!(window_bound(1 << 22), 1 << 22);
        // With a large limit, gpu.batch_rows = 100 no longer makes 100-row windows ...
        let big = SpillSizes::new(1 << 36, 64 << 30, 16, false, 16, window_bound(100));
        assert_eq!(big.window_rows, MIN_WINDOW_ROWS);
        // ... while a small limit still shrinks them below the floor.
        let small = SpillSizes::new(100, 1 << 20, 16, false, 1000, window_bound(100));
        assert!(small.window_rows < MIN_WINDOW_ROWS, "{small:?}");
    }
}
