//! The out-of-core join of seed 000 (Triton join), adapted to PCIe: when the build side's state
//! would not fit under `gpu.memory_limit`, both sides are radix-partitioned on the GPU by the top
//! bits of their key words and the partitions are kept in pinned host memory; then each
//! partition's build rows come back to the device, are prepared by the in-memory algorithm
//! ([`JoinBuild`]), and that partition's probe rows stream through them in groups.
//!
//! Equal keys fall in the same partition on both sides (the key words are the join's own), so
//! every join type is answered partition by partition: a build row is decided (matched or not)
//! within its partition. Rows whose key takes no part in matching (a NULL with NULL equals
//! nothing) stay in partition 0, where they come out as the join type asks. The in-memory PHJ
//! partitions on the low bits of the same words, so the two levels do not collide.
//!
//! Sizes come from the limit ([`SpillSizes`]): partitions small enough that one build state
//! takes an eighth of it (a quarter when skewed), chunks and probe groups of an eighth with at most
//! [`crate::device::SPILL_WORKERS`] of them on the device at once, output windows small enough
//! that the windows queued for the consumers stay within an eighth. A chunk is sorted by partition on
//! the device and downloaded whole into the pinned pool; a partition is uploaded from its row
//! ranges of every chunk straight from there (no staging copy).
//!
//! Limits: every probe stream goes through the partitions in step with the others (a round per
//! partition), so the cost grows with the partitions times the probe streams; and one probe
//! group's output is materialized at once, so a key whose matches multiply past the limit (NULL =
//! NULL over many NULL keys, hot keys on both sides) fails with a memory-limit error instead of
//! streaming. `DFG_OOC_TRACE=1` prints every step's time and the device memory in use.
//!
//! Differences from the paper: the paper's first pass writes to host memory from the kernel
//! through software write-combining buffers; here each chunk is sorted by partition on the device
//! and copied by the DMA engine, which moves the same bytes over the link once.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::JoinBuild;
use super::keys::{KeyPlan, prepare_keys};
use super::materialize::{GatherSpec, gather_columns};
use crate::columns::concat::{host_range_bytes, upload_row_ranges};
use crate::columns::{DeviceBatch, DeviceColumn, HostColumn, download_columns};
use crate::device::{Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::radix::{KeyWidth, ValueWidth, radix_sort_pairs};
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

    pub fn print(&self, what: &str) {
        if let Some((memory, _)) = &self.on {
            let steps: Vec<String> = self.steps.iter().map(|(n, ms)| format!("{n}={ms:.2}")).collect();
            eprintln!("ooc {what}: {} mem={}/{}", steps.join(" "), memory.used(), memory.limit());
        }
    }
}

/// Device memory a build state takes per byte of build input (the plan-time memory check's
/// factor, [`crate::rule::eligibility::BUILD_MEMORY_FACTOR`]).
pub const STATE_FACTOR: u64 = crate::rule::eligibility::BUILD_MEMORY_FACTOR;
/// Most partition bits: 4096 partitions.
pub const MAX_BITS: u32 = 12;

/// Whether a build input of `build_bytes` joins in memory under `limit` bytes: its state may take
/// half the limit, the rest is for probe chunks and output.
pub fn fits_in_memory(build_bytes: u64, limit: u64) -> bool {
    build_bytes.saturating_mul(STATE_FACTOR) <= limit / 2
}

/// How an out-of-core join divides its work, from the memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillSizes {
    /// Partition bits: 2^bits partitions.
    pub bits: u32,
    /// Input bytes per chunk partitioned at once, and per group of probe pieces joined at once.
    pub chunk_bytes: u64,
    /// Most build input bytes prepared at once (a quarter of the limit in state); a partition
    /// over this (skew) is built in chunks.
    pub build_bytes: u64,
    /// Pairs per output window.
    pub window_rows: u64,
}

impl SpillSizes {
    /// Sizes for a build input of `build_bytes` under `limit`, with `consumers` output streams
    /// (each may hold a few windows in flight) and output rows of `out_row_bytes`.
    pub fn new(build_bytes: u64, limit: u64, consumers: usize, out_row_bytes: u64, batch_rows: u64) -> Self {
        let eighth = (limit / 8).max(1);
        let state = build_bytes.saturating_mul(STATE_FACTOR);
        // Partitions of an eighth of the limit in state on average, up to a quarter when skewed.
        let parts = state.div_ceil(eighth).max(2);
        let bits = (64 - (parts - 1).leading_zeros()).min(MAX_BITS);
        // Windows: three per consumer (two queued, one being made) within an eighth.
        let window_bytes = eighth / (3 * consumers.max(1) as u64 + 3);
        let window_rows = (window_bytes / out_row_bytes.max(1)).clamp(64, batch_rows.max(64));
        SpillSizes {
            bits,
            chunk_bytes: (eighth / STATE_FACTOR).max(1),
            build_bytes: (2 * eighth / STATE_FACTOR).max(1),
            window_rows,
        }
    }

    pub fn partitions(&self) -> usize {
        1 << self.bits
    }

    /// Rows per chunk for rows of `row_bytes`.
    pub fn chunk_rows(&self, row_bytes: u64) -> usize {
        (self.chunk_bytes / row_bytes.max(1)).max(64) as usize
    }
}

/// One chunk of a side, downloaded to pinned host memory with its rows in partition order.
#[derive(Debug)]
struct Chunk {
    columns: Vec<HostColumn>,
}

/// The rows of one partition in one chunk.
#[derive(Debug, Clone)]
struct Piece {
    chunk: usize,
    rows: Range<usize>,
    bytes: u64,
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
        let part = gpu.alloc_filled(stream, rows as usize * 4, 0, "out-of-core partition of each row")?;
        if self.bits > 0 {
            let cols = super::key_columns(batch, key_cols)?;
            let keys = prepare_keys(gpu, stream, plan, &cols, rows)?;
            let (kernel, shift) = match plan.encoding.width() {
                KeyWidth::U32 => ("spill_part_k32", 32 - self.bits),
                KeyWidth::U64 => ("spill_part_k64", 64 - self.bits),
            };
            // spill_part_kXX(const K* keys, u64 items, const u32* item_rows, u32 shift, u32* part)
            gpu.launch_n(
                stream,
                "spill",
                kernel,
                keys.items,
                &[
                    ptr(&keys.keys, stream),
                    KArg::U64(keys.items),
                    opt_ptr(keys.item_rows.as_ref(), stream),
                    KArg::U32(shift),
                    ptr(&part, stream),
                ],
            )?;
        }
        trace.step("keys");
        let ids = iota(gpu, stream, rows)?;
        let (sorted, ids) =
            radix_sort_pairs(gpu, stream, part, ids, rows, KeyWidth::U32, ValueWidth::U32, 0, self.bits)?;
        trace.step("sort");
        let parts = self.parts.len();
        let bounds = gpu.alloc(stream, (parts + 1) * 4, "out-of-core partition bounds")?;
        // phj_boundaries_k32(keys, n, bits, offsets): partition p of keys sorted on their low
        // bits spans [offsets[p], offsets[p + 1]); here the keys are the partition numbers.
        gpu.launch_n(
            stream,
            "join",
            "phj_boundaries_k32",
            rows + 1,
            &[ptr(&sorted, stream), KArg::U64(rows), KArg::U32(self.bits), ptr(&bounds, stream)],
        )?;
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
            self.parts[p].push(Piece { chunk, rows: r, bytes });
        }
        self.rows += rows;
        self.chunks.push(Chunk { columns });
        Ok(())
    }

    /// Rows in pieces `range` of partition `p`.
    pub fn group_rows(&self, p: usize, range: Range<usize>) -> u64 {
        self.parts.get(p).and_then(|v| v.get(range)).map_or(0, |v| v.iter().map(|x| x.rows.len() as u64).sum())
    }

    /// Ranges of partition `p`'s pieces, each of at most `max_bytes` (or one piece).
    pub fn groups(&self, p: usize, max_bytes: u64) -> Vec<Range<usize>> {
        let Some(pieces) = self.parts.get(p) else { return Vec::new() };
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0usize, 0u64);
        for (i, piece) in pieces.iter().enumerate() {
            if i > start && bytes + piece.bytes > max_bytes {
                out.push(start..i);
                start = i;
                bytes = 0;
            }
            bytes += piece.bytes;
        }
        if start < pieces.len() {
            out.push(start..pieces.len());
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

/// Partition rounds of an out-of-core join whose build is shared by several probe streams
/// (`CollectLeft`): every participant joins partition 0, then 1, and so on; a partition's build
/// is prepared once, by the first participant to reach it, and released when the last one is
/// done with it, which also emits the build rows the join type decides at the end.
#[derive(Debug)]
pub struct Rounds {
    state: std::sync::Mutex<RoundState>,
    notify: tokio::sync::Notify,
}

#[derive(Debug)]
struct RoundState {
    round: usize,
    /// Participants still in the join, and how many of them are done with `round`.
    active: usize,
    done: usize,
    build: Option<Arc<tokio::sync::OnceCell<Arc<JoinBuild>>>>,
    failed: Option<String>,
}

/// A participant's place in [`Rounds`]: dropping it before [`Participant::complete`] leaves
/// the rounds (the others go on without it).
#[derive(Debug)]
pub struct Participant {
    rounds: Arc<Rounds>,
    completed: bool,
}

impl Rounds {
    pub fn new(participants: usize) -> Arc<Self> {
        Arc::new(Rounds {
            state: std::sync::Mutex::new(RoundState {
                round: 0,
                active: participants.max(1),
                done: 0,
                build: None,
                failed: None,
            }),
            notify: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, RoundState>> {
        self.state.lock().map_err(|_| gpu_error("the out-of-core join's rounds lock is poisoned"))
    }

    /// One participant's place (call once per participant).
    pub fn participant(self: &Arc<Self>) -> Participant {
        Participant { rounds: Arc::clone(self), completed: false }
    }

    /// Waits until round `p` starts; returns the cell holding its build.
    pub async fn enter(&self, p: usize) -> Result<Arc<tokio::sync::OnceCell<Arc<JoinBuild>>>> {
        loop {
            let notified = {
                let mut s = self.lock()?;
                if let Some(f) = &s.failed {
                    return Err(gpu_error(format!("another partition of this out-of-core join failed: {f}")));
                }
                if s.round == p {
                    return Ok(Arc::clone(s.build.get_or_insert_with(|| Arc::new(tokio::sync::OnceCell::new()))));
                }
                if s.round > p {
                    return Err(gpu_error(format!("out-of-core round {p} entered after it ended")));
                }
                // Registered before the lock is released, so no wake-up is missed.
                self.notify.notified()
            };
            notified.await;
        }
    }

    /// This participant is done with round `p`. The last one gets the round's build back, to
    /// emit its end-decided rows, and the next round starts.
    pub fn leave_round(&self, p: usize) -> Result<Option<Arc<JoinBuild>>> {
        let mut s = self.lock()?;
        if s.round != p {
            return Err(gpu_error(format!("out-of-core round {p} left while round {} runs", s.round)));
        }
        s.done += 1;
        if s.done < s.active {
            return Ok(None);
        }
        Ok(self.advance(&mut s))
    }

    fn advance(&self, s: &mut RoundState) -> Option<Arc<JoinBuild>> {
        let build = s.build.take().and_then(|c| c.get().cloned());
        s.round += 1;
        s.done = 0;
        self.notify.notify_waiters();
        build
    }

    /// Stops every participant with `why`.
    pub fn fail(&self, why: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.failed.get_or_insert_with(|| why.to_string());
        }
        self.notify.notify_waiters();
    }
}

impl Participant {
    /// All rounds done: dropping this no longer counts as leaving.
    pub fn complete(mut self) {
        self.completed = true;
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        if self.completed {
            return;
        }
        // Stopped early (its stream was dropped, or it failed and said so with `fail`): the
        // others no longer wait for it. Rows the round would have decided at its end are not
        // emitted, as with DataFusion's own join when a probe stream stops early.
        if let Ok(mut s) = self.rounds.state.lock() {
            s.active = s.active.saturating_sub(1);
            if s.active > 0 && s.done >= s.active {
                let _ = self.rounds.advance(&mut s);
            }
        }
        self.rounds.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rounds_wait_for_every_participant() {
        let rounds = Rounds::new(2);
        let (a, b) = (rounds.participant(), rounds.participant());
        let cell = rounds.enter(0).await.unwrap();
        assert!(Arc::ptr_eq(&cell, &rounds.enter(0).await.unwrap()), "one build per round");
        assert!(rounds.leave_round(0).unwrap().is_none());
        // Round 1 starts only when the second participant is done with round 0.
        let r = Arc::clone(&rounds);
        let waiter = tokio::spawn(async move { r.enter(1).await.map(|_| ()) });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(rounds.leave_round(0).unwrap().is_none(), "the round's build was never made");
        waiter.await.unwrap().unwrap();
        // A participant that stops early is no longer waited for.
        rounds.enter(1).await.unwrap();
        assert!(rounds.leave_round(1).unwrap().is_none());
        drop(b);
        rounds.enter(2).await.unwrap();
        a.complete();
        rounds.fail("boom");
        assert!(rounds.enter(2).await.unwrap_err().to_string().contains("boom"));
    }

    #[test]
    fn sizes_follow_the_limit() {
        // 1 GiB of build input under a 4 GiB limit: state 3 GiB, partitions of 512 MiB.
        let s = SpillSizes::new(1 << 30, 4 << 30, 1, 16, 1 << 22);
        assert_eq!(s.partitions(), 8);
        assert_eq!(s.chunk_bytes, (512 << 20) / 3);
        assert!(!fits_in_memory(1 << 30, 4 << 30));
        assert!(fits_in_memory(600 << 20, 4 << 30));
        // Small limits still give at least two partitions and windows of 64 rows.
        let s = SpillSizes::new(100, 1 << 20, 16, 1000, 1 << 22);
        assert_eq!(s.partitions(), 2);
        assert_eq!(s.window_rows, 64);
        // Partition bits are capped.
        assert_eq!(SpillSizes::new(1 << 40, 1 << 20, 1, 8, 1 << 22).bits, MAX_BITS);
    }
}
