//! GPU equi-joins over device batches: the algorithms of Wu et al. 2025 (NPJ, PHJ and SMJ, the last
//! two with GFUR or GFTR materialisation) behind one driver that gives DataFusion's semantics for
//! every join type. No DataFusion plan types here: `exec::join` adapts this to `HashJoinExec`.
//!
//! One build batch is prepared once ([`JoinBuild::new`]); probe chunks are joined against it
//! ([`JoinBuild::probe`]), and the build rows that only the end of the probe decides (outer,
//! semi, anti and mark joins on the build side) come from [`JoinBuild::finish`].
//!
//! Per probe chunk: keys ([`keys`]), transformation (sort or partition, for SMJ and PHJ), match
//! counts per probe item, an exclusive scan of them, then pairs written window by window, each
//! window holding whole probe items and about `batch_rows` pairs, so that no allocation holds a
//! large many-to-many result at once. Wide keys are confirmed per pair, matched flags are set,
//! and output columns are gathered (GFUR at row ids, GFTR at transformed positions).
//!
//! A build side whose state would not fit under the memory limit is joined out of core,
//! partition by partition through pinned host memory ([`triton`]).

pub mod chunksets;
pub mod filter;
pub use crate::primitives::keys;
pub use crate::primitives::materialize;
pub mod multi_gpu;
pub mod npj;
pub mod phj;
pub mod smj;
pub mod transform;
pub mod triton;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::JoinType;

use crate::columns::{DeviceBatch, DeviceColumn};
pub use crate::config::{JoinAlgorithm, JoinAlgorithmSetting};
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, ptr};
use crate::error::{CudaResultExt, Result, gpu_error};
use crate::primitives::gather;
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::{compose, flags_to_bitmap, gather_pairs, select_where, set_flags};
use keys::{KeyEncoding, KeyPlan, KeySide, prepare_keys, verify_pairs};
use materialize::{GatherSpec, can_transform, gather_columns, null_column};
use npj::NpjBuild;
use transform::{Transformed, transform_with_payloads};

/// Pairs an output window holds at least, whatever `gpu.join.window_rows` asks (only a memory limit
/// makes windows smaller): every window costs a few launches and allocations, about 0.1 ms on an
/// H100 whatever its size, so a result of 10^8 rows in windows of 100 would take minutes, and the
/// aggregate above it would group as many chunks.
pub const MIN_WINDOW_ROWS: u64 = 1 << 14;

/// The bound on an output window's pairs for a `gpu.join.window_rows` setting.
pub fn window_bound(batch_rows: usize) -> u64 {
    (batch_rows as u64).max(MIN_WINDOW_ROWS)
}

/// Where an output column comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputColumn {
    /// Column `i` of the build batch.
    Build(usize),
    /// Column `i` of the probe batch.
    Probe(usize),
    /// The mark of a mark join (non-null Boolean: the row has a match).
    Mark,
}

/// A join filter compiled for the device: the kernel's source (see [`filter::FilterCode`]) and
/// the batch columns it reads, in the order of its `cols` argument.
#[derive(Debug, Clone)]
pub struct FilterSpec {
    pub source: String,
    /// The values of the kernel's literals (its `lits` parameter).
    pub literals: Vec<u64>,
    pub columns: Vec<OutputColumn>,
    /// Whether the kernel can report an arrow error (decimal overflow).
    pub may_fail: bool,
}

/// What to join and how: DataFusion's join semantics in device terms.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub join_type: JoinType,
    pub keys: KeyPlan,
    /// Key columns in the build and probe batches, pairwise.
    pub build_keys: Vec<usize>,
    pub probe_keys: Vec<usize>,
    /// The output batch's columns, in order, and its schema.
    pub output: Vec<OutputColumn>,
    pub schema: SchemaRef,
    pub algorithm: JoinAlgorithm,
    /// Pairs come out in probe order, each probe row's matches in build order (the order
    /// DataFusion's hash join keeps when a plan relies on it). NPJ only.
    pub ordered: bool,
    /// NOT IN semantics of a null-aware anti join (LeftAnti, one key column).
    pub null_aware: bool,
    /// A residual predicate a matching pair must satisfy.
    pub filter: Option<FilterSpec>,
    /// Pairs per output window.
    pub batch_rows: u64,
}

impl JoinSpec {
    fn outputs_pairs(&self) -> bool {
        matches!(self.join_type, JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full)
    }

    fn needs_build_flags(&self) -> bool {
        matches!(
            self.join_type,
            JoinType::Left | JoinType::Full | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark
        )
    }

    /// Whether probe rows are decided by their matches (outer, semi, anti and mark joins on the
    /// probe side).
    pub fn needs_probe_flags(&self) -> bool {
        matches!(
            self.join_type,
            JoinType::Right | JoinType::Full | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark
        )
    }

    /// Whether [`JoinBuild::finish`] emits rows for this join type.
    pub fn emits_build_rows(&self) -> bool {
        self.needs_build_flags()
    }
}

/// Time spent in each phase, for metrics and benchmarks. With `synchronized` (benchmarks, and
/// every build) each phase ends with a stream synchronisation, so the times are the device's;
/// without it (the execs' probes) the host queues the next phase's kernels while the device runs
/// this one, a phase's time is what the host spent in it (waits for results it reads included),
/// and the probe waits for the device once, at its end. A small probe chunk with many output
/// windows took about 1.2 ms whatever its size when every phase and window waited.
#[derive(Debug, Default, Clone, Copy)]
pub struct PhaseTimes {
    pub synchronized: bool,
    /// Folding key columns into key words.
    pub keys: Duration,
    /// Sorting or partitioning keys with row ids (SMJ, PHJ) and, with GFTR, the payloads that
    /// travel in the same passes; or building the table (NPJ).
    pub transform: Duration,
    /// Finding matches: counts, scan and writing pairs.
    pub matching: Duration,
    /// Confirming wide keys, filters, flags, and gathering output columns.
    pub materialize: Duration,
    /// A multi-GPU join's splitting of its inputs by key range and their copies between the
    /// devices ([`multi_gpu`]).
    pub exchange: Duration,
}

impl PhaseTimes {
    /// Adds `other`'s phases to these.
    pub fn add(&mut self, other: &PhaseTimes) {
        self.keys += other.keys;
        self.transform += other.transform;
        self.matching += other.matching;
        self.materialize += other.materialize;
        self.exchange += other.exchange;
    }
}

/// Times a phase: with `sync`, the work it issued on `stream` is included.
fn phase<T>(stream: &Arc<CudaStream>, sync: bool, slot: &mut Duration, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let out = f()?;
    if sync {
        stream.synchronize().gpu("waiting for a join phase")?;
    }
    *slot += t.elapsed();
    Ok(out)
}

/// The build side in the chosen algorithm's form.
#[derive(Debug)]
enum Index {
    Npj(NpjBuild),
    Sorted(Transformed),
    Partitioned { side: Transformed, bits: u32, offsets: Vec<u32> },
}

/// A build side prepared on one device.
#[derive(Debug)]
pub struct OneBuild {
    spec: Arc<JoinSpec>,
    gpu: Arc<Gpu>,
    batch: DeviceBatch,
    keys: KeySide,
    index: Index,
    /// Per build row, 1 once matched (join types decided at the end of the probe).
    matched: Option<DeviceBuffer>,
    probe_has_null: AtomicBool,
    probe_nonempty: AtomicBool,
    /// Time spent building.
    pub times: PhaseTimes,
}

/// Pairs of one output window: positions in each side's transformed order, and row ids when
/// the side's positions are not rows already.
struct Pairs {
    pos_b: DeviceBuffer,
    pos_p: DeviceBuffer,
    rows_b: Option<DeviceBuffer>,
    rows_p: Option<DeviceBuffer>,
    n: u64,
}

/// How a side's match positions map to its rows.
#[derive(Debug, Clone, Copy)]
enum RowMap<'a> {
    /// Positions are rows.
    Identity,
    /// The row at each position.
    Map(&'a DeviceBuffer),
    /// The side was transformed without its row ids ([`needs_rows`] said none are read).
    Dropped,
}

impl<'a> RowMap<'a> {
    fn of(perm: Option<&'a DeviceBuffer>, if_none: RowMap<'a>) -> Self {
        perm.map(RowMap::Map).unwrap_or(if_none)
    }

    /// The rows of the positions `pos` when `needed` (None: positions are rows, or not needed).
    fn compose(
        &self,
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        pos: &DeviceBuffer,
        n: u64,
        needed: bool,
    ) -> Result<Option<DeviceBuffer>> {
        match self {
            RowMap::Map(m) if needed => Ok(Some(compose(gpu, stream, m, pos, n)?)),
            RowMap::Dropped if needed => Err(gpu_error("the join needs row ids that its transformation dropped")),
            _ => Ok(None),
        }
    }
}

fn rows_of<'a>(pos: &'a DeviceBuffer, rows: &'a Option<DeviceBuffer>, map: RowMap<'_>) -> Result<&'a DeviceBuffer> {
    match (rows, map) {
        (Some(r), _) => Ok(r),
        (None, RowMap::Identity) => Ok(pos),
        (None, _) => Err(gpu_error("join pairs need row ids that were not computed")),
    }
}

/// The column indices of GFTR candidates.
fn gftr_indices(gftr: &[(usize, &DeviceColumn)]) -> Vec<usize> {
    gftr.iter().map(|(i, _)| *i).collect()
}

/// Whether a join reads the rows (not only the transformed columns) of its build (`build`) or
/// probe side: for wide keys' check, the join filter, the matched flags, or an output column
/// that did not move with the keys (`transformed` lists those that did).
fn needs_rows(spec: &JoinSpec, build: bool, transformed: &[usize]) -> bool {
    let flags = if build { spec.needs_build_flags() } else { spec.needs_probe_flags() };
    spec.keys.encoding == KeyEncoding::Wide
        || spec.filter.is_some()
        || flags
        || spec.outputs_pairs()
            && spec.output.iter().any(|o| match (o, build) {
                (OutputColumn::Build(i), true) | (OutputColumn::Probe(i), false) => !transformed.contains(i),
                _ => false,
            })
}

/// Where an emitted batch's rows come from, per side.
enum Source<'a> {
    /// The side's rows at these row ids.
    Rows(&'a DeviceBuffer),
    /// NULLs (the missing side of an outer join).
    Nulls,
    /// Every row of the side's batch, in order (shared, not copied).
    All,
}

/// The GFTR candidates among a side's output columns: non-null 4- or 8-byte columns.
fn gftr_columns<'a>(spec: &JoinSpec, batch: &'a DeviceBatch, build: bool) -> Vec<(usize, &'a DeviceColumn)> {
    if !spec.algorithm.gftr() || !spec.outputs_pairs() {
        return Vec::new();
    }
    let mut out: Vec<(usize, &DeviceColumn)> = Vec::new();
    for o in &spec.output {
        let i = match (o, build) {
            (OutputColumn::Build(i), true) | (OutputColumn::Probe(i), false) => *i,
            _ => continue,
        };
        let col = batch.columns()[i].as_ref();
        if can_transform(&col.data_type) && col.validity.is_none() && !out.iter().any(|(j, _)| *j == i) {
            out.push((i, col));
        }
    }
    out
}

pub(crate) fn key_columns(batch: &DeviceBatch, idx: &[usize]) -> Result<Vec<Arc<DeviceColumn>>> {
    idx.iter()
        .map(|i| {
            batch.columns().get(*i).cloned().ok_or_else(|| gpu_error(format!("join key column {i} is out of range")))
        })
        .collect()
}

impl OneBuild {
    /// Prepares the build batch on `stream` and waits for it, so that any stream may probe.
    pub fn new(gpu: Arc<Gpu>, stream: &Arc<CudaStream>, spec: Arc<JoinSpec>, batch: DeviceBatch) -> Result<Self> {
        if spec.ordered && spec.algorithm != JoinAlgorithm::Npj {
            return Err(gpu_error("an order-preserving join must use npj"));
        }
        let mut times = PhaseTimes { synchronized: true, ..PhaseTimes::default() };
        let sync = times.synchronized;
        let rows = batch.num_rows() as u64;
        let cols = key_columns(&batch, &spec.build_keys)?;
        let keys = phase(stream, sync, &mut times.keys, || prepare_keys(&gpu, stream, &spec.keys, &cols, rows))?;
        let width = spec.keys.encoding.width();
        let index = match spec.algorithm {
            JoinAlgorithm::Npj => Index::Npj(phase(stream, sync, &mut times.transform, || {
                NpjBuild::build(&gpu, stream, &keys, width, spec.ordered)
            })?),
            JoinAlgorithm::SmjGfur | JoinAlgorithm::SmjGftr | JoinAlgorithm::SmjMultiGpu => {
                let gftr = gftr_columns(&spec, &batch, true);
                let rows = needs_rows(&spec, true, &gftr_indices(&gftr));
                Index::Sorted(phase(stream, sync, &mut times.transform, || {
                    transform_with_payloads(&gpu, stream, &keys, width, width.bits(), &gftr, rows)
                })?)
            }
            JoinAlgorithm::PhjGfur | JoinAlgorithm::PhjGftr => {
                let bits = phj::partition_bits(keys.items);
                let gftr = gftr_columns(&spec, &batch, true);
                let rows = needs_rows(&spec, true, &gftr_indices(&gftr));
                let (t, offsets) = phase(stream, sync, &mut times.transform, || {
                    let t = transform_with_payloads(&gpu, stream, &keys, width, bits, &gftr, rows)?;
                    let offsets = phj::offsets(&gpu, stream, &t, bits, width)?;
                    Ok((t, offsets))
                })?;
                Index::Partitioned { side: t, bits, offsets }
            }
        };
        let matched = if spec.needs_build_flags() {
            Some(gpu.alloc_filled(stream, rows as usize, 0, "matched build rows")?)
        } else {
            None
        };
        stream.synchronize().gpu("waiting for the join's build")?;
        Ok(OneBuild {
            spec,
            gpu,
            batch,
            keys,
            index,
            matched,
            probe_has_null: AtomicBool::new(false),
            probe_nonempty: AtomicBool::new(false),
            times,
        })
    }

    fn build_perm(&self) -> RowMap<'_> {
        match &self.index {
            Index::Npj(t) => RowMap::of(t.csr_rows.as_ref(), RowMap::Identity),
            Index::Sorted(t) | Index::Partitioned { side: t, .. } => RowMap::of(t.perm.as_ref(), RowMap::Dropped),
        }
    }

    fn build_transformed(&self, i: usize) -> Option<&DeviceBuffer> {
        match &self.index {
            Index::Npj(_) => None,
            Index::Sorted(t) | Index::Partitioned { side: t, .. } => t.column(i),
        }
    }

    /// Joins one probe chunk, handing each output batch (one window of about `batch_rows`
    /// pairs, on `stream`) to `sink` as soon as it is made. A sink that waits for its consumer
    /// bounds the join's output in device memory to the windows in flight, whatever the chunk's
    /// fan-out; an error from the sink stops the probe.
    pub fn probe_into(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        times: &mut PhaseTimes,
        sink: &mut dyn FnMut(DeviceBatch) -> Result<()>,
    ) -> Result<()> {
        self.probe_windows(stream, chunk, times, None, true, sink)
    }

    /// Joins one probe chunk against this build when the build side is one of several chunks
    /// that each see the whole probe side (an out-of-core partition too large for one build).
    /// `flags` (one zeroed byte per probe row, ordered before `stream`) collects the probe rows'
    /// matches across the build chunks; the probe rows the join type decides by them (unmatched,
    /// semi, anti, mark) come out only with the `last` build chunk.
    pub fn probe_part(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        times: &mut PhaseTimes,
        flags: Option<&DeviceBuffer>,
        last: bool,
    ) -> Result<Vec<DeviceBatch>> {
        let mut out = Vec::new();
        self.probe_windows(stream, chunk, times, flags, last, &mut |b| {
            out.push(b);
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Self::probe_part`], each output batch handed to `sink` as it is made.
    fn probe_windows(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        times: &mut PhaseTimes,
        flags: Option<&DeviceBuffer>,
        last: bool,
        sink: &mut dyn FnMut(DeviceBatch) -> Result<()>,
    ) -> Result<()> {
        let sync = times.synchronized;
        let (spec, gpu) = (&*self.spec, &*self.gpu);
        let rows = chunk.num_rows() as u64;
        let key_cols = key_columns(chunk, &spec.probe_keys)?;
        if spec.null_aware {
            if rows > 0 {
                self.probe_nonempty.store(true, Ordering::SeqCst);
            }
            if key_cols.iter().any(|c| c.null_count > 0) {
                self.probe_has_null.store(true, Ordering::SeqCst);
            }
            if self.probe_has_null.load(Ordering::SeqCst) {
                return Ok(()); // NOT IN against a set holding NULL is never true
            }
        }
        let width = spec.keys.encoding.width();
        let pkeys = phase(stream, sync, &mut times.keys, || prepare_keys(gpu, stream, &spec.keys, &key_cols, rows))?;
        let items = pkeys.items;

        // Match counts per probe item, and what writes the pairs.
        enum Writer {
            Csr(DeviceBuffer),
            Phj { units: DeviceBuffer, nunits: u64, cursor: DeviceBuffer, bits: u32 },
        }
        let mut probe_t: Option<Transformed> = None;
        let (counts, writer) = match &self.index {
            Index::Npj(t) => {
                let (start, count) = phase(stream, sync, &mut times.matching, || t.probe(gpu, stream, &pkeys))?;
                (count, Writer::Csr(start))
            }
            Index::Sorted(b) => {
                let gftr = gftr_columns(spec, chunk, false);
                let rows = needs_rows(spec, false, &gftr_indices(&gftr));
                let p = phase(stream, sync, &mut times.transform, || {
                    transform_with_payloads(gpu, stream, &pkeys, width, width.bits(), &gftr, rows)
                })?;
                let (start, count) =
                    phase(stream, sync, &mut times.matching, || smj::bounds(gpu, stream, b, &p, width))?;
                probe_t = Some(p);
                (count, Writer::Csr(start))
            }
            Index::Partitioned { side, bits, offsets } => {
                let gftr = gftr_columns(spec, chunk, false);
                let rows = needs_rows(spec, false, &gftr_indices(&gftr));
                let (p, poff) = phase(stream, sync, &mut times.transform, || {
                    let p = transform_with_payloads(gpu, stream, &pkeys, width, *bits, &gftr, rows)?;
                    let poff = phj::offsets(gpu, stream, &p, *bits, width)?;
                    Ok((p, poff))
                })?;
                let (counts, units, nunits, cursor) = phase(stream, sync, &mut times.matching, || {
                    let units = phj::units(offsets, &poff)?;
                    let nunits = (units.len() / 4) as u64;
                    let units = crate::primitives::upload_slice(gpu, stream, &units, "join work units")?;
                    let counts = phj::count(gpu, stream, side, &p, &units, nunits, *bits, width)?;
                    let cursor = gpu.alloc_filled(stream, items as usize * 4, 0, "join write cursors")?;
                    Ok((counts, units, nunits, cursor))
                })?;
                probe_t = Some(p);
                (counts, Writer::Phj { units, nunits, cursor, bits: *bits })
            }
        };
        let probe_perm = match &probe_t {
            Some(p) => RowMap::of(p.perm.as_ref(), RowMap::Dropped),
            None => RowMap::of(pkeys.item_rows.as_ref(), RowMap::Identity),
        };
        let (offsets, total) = phase(stream, sync, &mut times.matching, || {
            let (offsets, total) = exclusive_scan(gpu, stream, &counts, items, ScanKind::U32ToU64, true)?;
            let total = total.ok_or_else(|| gpu_error("scan returned no total"))?;
            Ok((offsets, gpu.read::<u64>(stream, &total, 0, 1)?[0]))
        })?;
        let windows = self.windows(stream, &offsets, items, total)?;

        let own_flags = match flags {
            None if spec.needs_probe_flags() => {
                Some(gpu.alloc_filled(stream, rows as usize, 0, "matched probe rows")?)
            }
            _ => None,
        };
        let probe_flags: Option<&DeviceBuffer> = match flags {
            Some(f) if spec.needs_probe_flags() => {
                if f.len() < rows as usize {
                    return Err(gpu_error("probe flags shorter than the probe chunk"));
                }
                Some(f)
            }
            _ => own_flags.as_ref(),
        };
        let wide = spec.keys.encoding == KeyEncoding::Wide;
        let build_perm = self.build_perm();
        // The same predicate that decided, at transformation, whether each side kept its rows.
        let build_moved = match &self.index {
            Index::Npj(_) => Vec::new(),
            Index::Sorted(t) | Index::Partitioned { side: t, .. } => t.column_indices(),
        };
        let need_rows_b = needs_rows(spec, true, &build_moved);
        let need_rows_p =
            needs_rows(spec, false, &probe_t.as_ref().map(Transformed::column_indices).unwrap_or_default());
        for (j0, j1, o0, o1) in windows {
            let n = o1 - o0;
            let (pos_b, pos_p) = phase(stream, sync, &mut times.matching, || match &writer {
                Writer::Csr(start) => csr_expand(gpu, stream, start, &counts, &offsets, (j0, j1, o0, n)),
                Writer::Phj { units, nunits, cursor, bits } => {
                    let (Some(p), Index::Partitioned { side, .. }) = (&probe_t, &self.index) else {
                        return Err(gpu_error("a partitioned probe without its partitions"));
                    };
                    phj::write(gpu, stream, side, p, units, *nunits, *bits, width, &offsets, cursor, (j0, j1, o0, n))
                }
            })?;
            let batch = phase(stream, sync, &mut times.materialize, || {
                let mut pairs = Pairs {
                    rows_b: build_perm.compose(gpu, stream, &pos_b, n, need_rows_b)?,
                    rows_p: probe_perm.compose(gpu, stream, &pos_p, n, need_rows_p)?,
                    pos_b,
                    pos_p,
                    n,
                };
                if wide {
                    let rb = rows_of(&pairs.pos_b, &pairs.rows_b, build_perm)?;
                    let rp = rows_of(&pairs.pos_p, &pairs.rows_p, probe_perm)?;
                    let eq = verify_pairs(gpu, stream, &spec.keys, &self.keys, &pkeys, rb, rp, pairs.n)?;
                    pairs = self.keep_pairs(stream, pairs, &eq)?;
                }
                if let Some(f) = &spec.filter
                    && pairs.n > 0
                {
                    let rb = rows_of(&pairs.pos_b, &pairs.rows_b, build_perm)?;
                    let rp = rows_of(&pairs.pos_p, &pairs.rows_p, probe_perm)?;
                    let keep = self.evaluate_filter(stream, f, chunk, rb, rp, pairs.n)?;
                    pairs = self.keep_pairs(stream, pairs, &keep)?;
                }
                if pairs.n == 0 {
                    return Ok(None);
                }
                if let Some(m) = &self.matched {
                    set_flags(gpu, stream, rows_of(&pairs.pos_b, &pairs.rows_b, build_perm)?, pairs.n, m)?;
                }
                if let Some(f) = &probe_flags {
                    set_flags(gpu, stream, rows_of(&pairs.pos_p, &pairs.rows_p, probe_perm)?, pairs.n, f)?;
                }
                if !spec.outputs_pairs() {
                    return Ok(None);
                }
                self.pair_batch(stream, chunk, probe_t.as_ref(), &pairs, build_perm, probe_perm).map(Some)
            })?;
            if let Some(b) = batch {
                sink(b)?;
            }
        }
        if let Some(flags) = probe_flags.filter(|_| last) {
            let emitted = phase(stream, sync, &mut times.materialize, || self.emit_probe_rows(stream, chunk, flags))?;
            for b in emitted {
                sink(b)?;
            }
        }
        // The probe's device work is done when it returns, however its phases were timed: other
        // streams read the matched flags it set (`finish`), and the build it read is freed on the
        // build's stream once every probe has returned.
        if !sync {
            stream.synchronize().gpu("waiting for a join probe")?;
        }
        Ok(())
    }

    /// The build rows decided at the end of the probe (outer, semi, anti and mark joins on the
    /// build side). Call once, after every probe chunk of every partition sharing this build.
    pub fn finish(&self, stream: &Arc<CudaStream>, times: &mut PhaseTimes) -> Result<Vec<DeviceBatch>> {
        let Some(matched) = &self.matched else { return Ok(Vec::new()) };
        let (spec, gpu) = (&*self.spec, &*self.gpu);
        let rows = self.batch.num_rows() as u64;
        // Once per join: always waited for, like the build.
        phase(stream, true, &mut times.materialize, || {
            let batch = match spec.join_type {
                JoinType::LeftMark => {
                    Some(self.assemble(stream, None, Source::All, Source::Nulls, Some((matched, None)), rows)?)
                }
                JoinType::LeftSemi => self.select_build(stream, matched, 1)?,
                JoinType::LeftAnti if spec.null_aware => {
                    if self.probe_has_null.load(Ordering::SeqCst) {
                        None
                    } else {
                        if self.probe_nonempty.load(Ordering::SeqCst)
                            && let Some(ok) = &self.keys.takes_part
                        {
                            // Rows with a NULL key are not NOT IN a non-empty set: mark them.
                            // or_not_flags(const u8* ok, u64 n, u8* flags)
                            gpu.launch_n(
                                stream,
                                kernel::OR_NOT_FLAGS,
                                rows,
                                &[ptr(ok, stream), KArg::U64(rows), ptr(matched, stream)],
                            )?;
                        }
                        self.select_build(stream, matched, 0)?
                    }
                }
                JoinType::Left | JoinType::Full | JoinType::LeftAnti => self.select_build(stream, matched, 0)?,
                _ => None,
            };
            Ok(batch.into_iter().collect())
        })
    }

    fn select_build(&self, stream: &Arc<CudaStream>, flags: &DeviceBuffer, want: u8) -> Result<Option<DeviceBatch>> {
        let (sel, n) = select_where(&self.gpu, stream, flags, self.batch.num_rows() as u64, want)?;
        if n == 0 {
            return Ok(None);
        }
        self.assemble(stream, None, Source::Rows(&sel), Source::Nulls, None, n as u64).map(Some)
    }

    /// Probe rows decided by this chunk: unmatched (Right, Full, RightAnti), matched
    /// (RightSemi), or all with their mark (RightMark).
    fn emit_probe_rows(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        flags: &DeviceBuffer,
    ) -> Result<Vec<DeviceBatch>> {
        let rows = chunk.num_rows() as u64;
        if rows == 0 {
            return Ok(Vec::new());
        }
        if self.spec.join_type == JoinType::RightMark {
            return Ok(vec![self.assemble(
                stream,
                Some(chunk),
                Source::Nulls,
                Source::All,
                Some((flags, None)),
                rows,
            )?]);
        }
        let want = if self.spec.join_type == JoinType::RightSemi { 1 } else { 0 };
        let (sel, n) = select_where(&self.gpu, stream, flags, rows, want)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        Ok(vec![self.assemble(stream, Some(chunk), Source::Nulls, Source::Rows(&sel), None, n as u64)?])
    }

    /// The pairs whose flag in `keep` is set (in order).
    fn keep_pairs(&self, stream: &Arc<CudaStream>, pairs: Pairs, keep: &DeviceBuffer) -> Result<Pairs> {
        let gpu = &*self.gpu;
        let (sel, m) = select_where(gpu, stream, keep, pairs.n, 1)?;
        let m = m as u64;
        if m == pairs.n {
            return Ok(pairs);
        }
        let (pos_b, pos_p) = gather_pairs(gpu, stream, &pairs.pos_b, &pairs.pos_p, &sel, m)?;
        let (rows_b, rows_p) = match (&pairs.rows_b, &pairs.rows_p) {
            (Some(b), Some(p)) => {
                let (b, p) = gather_pairs(gpu, stream, b, p, &sel, m)?;
                (Some(b), Some(p))
            }
            (Some(b), None) => (Some(gather(gpu, stream, b, &sel, m, 4)?), None),
            (None, Some(p)) => (None, Some(gather(gpu, stream, p, &sel, m, 4)?)),
            (None, None) => (None, None),
        };
        Ok(Pairs { pos_b, pos_p, rows_b, rows_p, n: m })
    }

    /// Byte flags, 1 where the pair of build row `rb[k]` and probe row `rp[k]` satisfies the
    /// join filter.
    fn evaluate_filter(
        &self,
        stream: &Arc<CudaStream>,
        f: &FilterSpec,
        chunk: &DeviceBatch,
        rb: &DeviceBuffer,
        rp: &DeviceBuffer,
        n: u64,
    ) -> Result<DeviceBuffer> {
        let gpu = &*self.gpu;
        let mut read = Vec::with_capacity(f.columns.len());
        for c in &f.columns {
            read.push(match *c {
                OutputColumn::Build(i) => self.batch.columns()[i].as_ref(),
                OutputColumn::Probe(i) => chunk.columns()[i].as_ref(),
                OutputColumn::Mark => return Err(gpu_error("a join filter reading the mark column")),
            });
        }
        let cols = crate::expr::upload_column_addresses(gpu, stream, &read, "join filter columns")?;
        let keep = gpu.alloc(stream, n as usize, "join filter results")?;
        let err = gpu.alloc_filled(stream, 4, 0, "join filter error flag")?;
        let func = gpu.kernels().generated_function("filter", &f.source, "join_filter")?;
        let lits = crate::expr::upload_literals(gpu, stream, &f.literals)?;
        // join_filter(const u32* rb, const u32* rp, u64 n, const u64* cols, const u64* lits, u8* keep, u32* err)
        gpu.launch_function(
            stream,
            &func,
            "join_filter",
            crate::device::grid_for(n, 256, gpu.info().sm_count),
            &[
                ptr(rb, stream),
                ptr(rp, stream),
                KArg::U64(n),
                ptr(&cols, stream),
                crate::device::opt_ptr(lits.as_ref(), stream),
                ptr(&keep, stream),
                ptr(&err, stream),
            ],
        )?;
        if f.may_fail {
            crate::expr::expression_outcome(gpu.read::<u32>(stream, &err, 0, 1)?[0])?;
        }
        Ok(keep)
    }

    fn pair_batch(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        probe_t: Option<&Transformed>,
        pairs: &Pairs,
        build_perm: RowMap<'_>,
        probe_perm: RowMap<'_>,
    ) -> Result<DeviceBatch> {
        let mut specs = Vec::with_capacity(self.spec.output.len());
        for o in &self.spec.output {
            specs.push(match *o {
                OutputColumn::Build(i) => match self.build_transformed(i) {
                    Some(values) => positions(&self.batch, i, values, &pairs.pos_b)?,
                    None => GatherSpec::Rows {
                        col: self.batch.columns()[i].as_ref(),
                        rows: rows_of(&pairs.pos_b, &pairs.rows_b, build_perm)?,
                        may_be_null: false,
                    },
                },
                OutputColumn::Probe(i) => match probe_t.and_then(|p| p.column(i)) {
                    Some(values) => positions(chunk, i, values, &pairs.pos_p)?,
                    None => GatherSpec::Rows {
                        col: chunk.columns()[i].as_ref(),
                        rows: rows_of(&pairs.pos_p, &pairs.rows_p, probe_perm)?,
                        may_be_null: false,
                    },
                },
                OutputColumn::Mark => return Err(gpu_error("a mark column in a join that outputs pairs")),
            });
        }
        let cols = gather_columns(&self.gpu, stream, specs, pairs.n)?;
        DeviceBatch::try_new(
            Arc::clone(&self.spec.schema),
            cols.into_iter().map(Arc::new).collect(),
            pairs.n as usize,
            Arc::clone(&self.gpu),
            Arc::clone(stream),
        )
    }

    /// A batch of `n` rows: build and probe columns from their sources, and the mark from
    /// `mark` (flags, optionally at row ids).
    fn assemble(
        &self,
        stream: &Arc<CudaStream>,
        chunk: Option<&DeviceBatch>,
        build: Source<'_>,
        probe: Source<'_>,
        mark: Option<(&DeviceBuffer, Option<&DeviceBuffer>)>,
        n: u64,
    ) -> Result<DeviceBatch> {
        let gpu = &*self.gpu;
        let schema = &self.spec.schema;
        let mut cols: Vec<Option<Arc<DeviceColumn>>> = vec![None; self.spec.output.len()];
        let mut specs = Vec::new();
        let mut spec_at = Vec::new();
        for (k, o) in self.spec.output.iter().enumerate() {
            let (batch, source, i) = match *o {
                OutputColumn::Build(i) => (Some(&self.batch), &build, i),
                OutputColumn::Probe(i) => (chunk, &probe, i),
                OutputColumn::Mark => {
                    let (flags, idx) = mark.ok_or_else(|| gpu_error("a mark column without flags"))?;
                    specs.push(GatherSpec::Bitmap(flags_to_bitmap(gpu, stream, flags, idx, n)?));
                    spec_at.push(k);
                    continue;
                }
            };
            match source {
                Source::Nulls => {
                    cols[k] = Some(Arc::new(null_column(gpu, stream, schema.field(k).data_type(), n)?));
                }
                Source::All => {
                    let b = batch.ok_or_else(|| gpu_error("join output from a missing batch"))?;
                    cols[k] = Some(Arc::clone(&b.columns()[i]));
                }
                Source::Rows(rows) => {
                    let b = batch.ok_or_else(|| gpu_error("join output from a missing batch"))?;
                    specs.push(GatherSpec::Rows { col: b.columns()[i].as_ref(), rows, may_be_null: false });
                    spec_at.push(k);
                }
            }
        }
        for (k, c) in spec_at.into_iter().zip(gather_columns(gpu, stream, specs, n)?) {
            cols[k] = Some(Arc::new(c));
        }
        let cols = cols
            .into_iter()
            .map(|c| c.ok_or_else(|| gpu_error("a join output column was not built")))
            .collect::<Result<_>>()?;
        DeviceBatch::try_new(Arc::clone(schema), cols, n as usize, Arc::clone(&self.gpu), Arc::clone(stream))
    }

    /// Output windows of whole probe items: `(j0, j1, o0, o1)` with items `[j0, j1)` writing
    /// pairs `[o0, o1)`, each about `batch_rows` pairs (more only when one item has more).
    fn windows(
        &self,
        stream: &Arc<CudaStream>,
        offsets: &DeviceBuffer,
        items: u64,
        total: u64,
    ) -> Result<Vec<(u64, u64, u64, u64)>> {
        let bound = self.spec.batch_rows.max(1);
        if total == 0 {
            return Ok(Vec::new());
        }
        if total <= bound {
            return Ok(vec![(0, items, 0, total)]);
        }
        let nwin = total.div_ceil(bound);
        // Windows of about equal size: 4 x 530 K + 8 K rows would cost a fifth window's
        // launches for almost nothing.
        let bound = total.div_ceil(nwin);
        let gpu = &*self.gpu;
        // Item bounds then output bounds, nwin + 1 of each, in one buffer read at once.
        let len = nwin as usize + 1;
        let bounds = gpu.alloc(stream, 2 * len * 8, "join output windows")?;
        let base = bounds.raw_ptr(stream);
        // window_bounds(offsets, n, total, bound, nwin, out_j, out_o)
        gpu.launch_n(
            stream,
            kernel::WINDOW_BOUNDS,
            nwin + 1,
            &[
                ptr(offsets, stream),
                KArg::U64(items),
                KArg::U64(total),
                KArg::U64(bound),
                KArg::U64(nwin),
                KArg::U64(base),
                KArg::U64(base + 8 * len as u64),
            ],
        )?;
        let bounds = gpu.read::<u64>(stream, &bounds, 0, 2 * len)?;
        let (js, os) = bounds.split_at(len);
        Ok((0..nwin as usize).filter(|w| os[w + 1] > os[*w]).map(|w| (js[w], js[w + 1], os[w], os[w + 1])).collect())
    }
}

/// A GFTR gather of column `i` of `batch` from its transformed `values`.
fn positions<'a>(
    batch: &DeviceBatch,
    i: usize,
    values: &'a DeviceBuffer,
    pos: &'a DeviceBuffer,
) -> Result<GatherSpec<'a>> {
    let dt = batch.columns()[i].data_type.clone();
    let width = dt.primitive_width().ok_or_else(|| gpu_error(format!("a transformed {dt} column")))?;
    Ok(GatherSpec::Positions { data_type: dt, values, width, pos })
}

/// Pairs of the probe items `[j0, j1)` from their runs: build position `start[j] + k` for
/// `k < count[j]`, written from `offsets[j] - o0`.
fn csr_expand(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    start: &DeviceBuffer,
    count: &DeviceBuffer,
    offsets: &DeviceBuffer,
    window: (u64, u64, u64, u64),
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let (j0, j1, o0, n) = window;
    let out_b = gpu.alloc(stream, n as usize * 4, "join pairs")?;
    let out_p = gpu.alloc(stream, n as usize * 4, "join pairs")?;
    // csr_expand(start, count, offsets, j0, j1, o_base, out_b, out_p)
    gpu.launch_n(
        stream,
        kernel::CSR_EXPAND,
        j1 - j0,
        &[
            ptr(start, stream),
            ptr(count, stream),
            ptr(offsets, stream),
            KArg::U64(j0),
            KArg::U64(j1),
            KArg::U64(o0),
            ptr(&out_b, stream),
            ptr(&out_p, stream),
        ],
    )?;
    Ok((out_b, out_p))
}

/// How a build side was prepared: on one device, or spread over the session's device set.
#[derive(Debug)]
enum Prepared {
    One(OneBuild),
    Spread(multi_gpu::SpreadBuild),
}

/// A prepared build side: on the session's device, or, for the multi-GPU join
/// ([`JoinAlgorithm::SmjMultiGpu`]), spread over its device set, whose outputs come back to the
/// session's device.
#[derive(Debug)]
pub struct JoinBuild {
    spec: Arc<JoinSpec>,
    gpu: Arc<Gpu>,
    rows: usize,
    prepared: Prepared,
    /// Time spent building.
    pub times: PhaseTimes,
}

impl JoinBuild {
    /// Prepares the build batch on `stream` and waits for it, so that any stream may probe. The
    /// multi-GPU join spreads it over `gpu`'s device set (`gpu.devices`); with one device it is
    /// the sort-merge join with GFTR.
    pub fn new(gpu: Arc<Gpu>, stream: &Arc<CudaStream>, spec: Arc<JoinSpec>, batch: DeviceBatch) -> Result<Self> {
        let rows = batch.num_rows();
        if !spec.algorithm.multi_gpu() {
            let one = OneBuild::new(Arc::clone(&gpu), stream, Arc::clone(&spec), batch)?;
            let times = one.times;
            return Ok(JoinBuild { spec, gpu, rows, prepared: Prepared::One(one), times });
        }
        let device_spec = Arc::new(multi_gpu::device_spec(&spec));
        let set = gpu.device_set();
        if set.len() == 1 {
            let one = OneBuild::new(Arc::clone(&gpu), stream, device_spec, batch)?;
            let times = one.times;
            return Ok(JoinBuild { spec, gpu, rows, prepared: Prepared::One(one), times });
        }
        let spread = multi_gpu::SpreadBuild::new(&set, device_spec, vec![batch])?;
        let mut times = spread.times();
        times.exchange += spread.exchange;
        Ok(JoinBuild { spec, gpu, rows, prepared: Prepared::Spread(spread), times })
    }

    /// Whether no probe row can produce output, so the probe side need not be read at all (as
    /// DataFusion's hash join skips it, and with it any error its input would raise): the build
    /// is empty and the join type outputs only matched or build rows. (DataFusion also skips
    /// the probe when every build key is NULL and NULLs match nothing; that case still probes.)
    pub fn probe_is_moot(&self) -> bool {
        self.rows == 0 && self.spec.join_type.empty_build_side_produces_empty_result()
    }

    pub fn spec(&self) -> &Arc<JoinSpec> {
        &self.spec
    }

    /// Joins one probe chunk; returns its output batches (on `stream`).
    pub fn probe(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        times: &mut PhaseTimes,
    ) -> Result<Vec<DeviceBatch>> {
        self.probe_part(stream, chunk, times, None, true)
    }

    /// Joins one probe chunk, handing each output batch to `sink` (see
    /// [`OneBuild::probe_into`]). A spread build hands over each device's batches once every
    /// device has joined its share of the chunk.
    pub fn probe_into(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        times: &mut PhaseTimes,
        sink: &mut dyn FnMut(DeviceBatch) -> Result<()>,
    ) -> Result<()> {
        match &self.prepared {
            Prepared::One(b) => b.probe_into(stream, chunk, times, sink),
            Prepared::Spread(s) => {
                let outs = s.probe(vec![chunk.clone()], times)?;
                multi_gpu::gather_home(&self.gpu, stream, outs)?.into_iter().try_for_each(sink)
            }
        }
    }

    /// Joins one probe chunk against one build chunk of several (see [`OneBuild::probe_part`]);
    /// a spread build is always whole.
    pub fn probe_part(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &DeviceBatch,
        times: &mut PhaseTimes,
        flags: Option<&DeviceBuffer>,
        last: bool,
    ) -> Result<Vec<DeviceBatch>> {
        match &self.prepared {
            Prepared::One(b) => b.probe_part(stream, chunk, times, flags, last),
            Prepared::Spread(_) if flags.is_some() || !last => {
                Err(gpu_error("a multi-GPU join's build cannot be one chunk of several"))
            }
            Prepared::Spread(s) => multi_gpu::gather_home(&self.gpu, stream, s.probe(vec![chunk.clone()], times)?),
        }
    }

    /// The build rows the join type emits once the probe has ended (see [`OneBuild::finish`]).
    pub fn finish(&self, stream: &Arc<CudaStream>, times: &mut PhaseTimes) -> Result<Vec<DeviceBatch>> {
        match &self.prepared {
            Prepared::One(b) => b.finish(stream, times),
            Prepared::Spread(s) => {
                let outs = s.finish(times)?;
                multi_gpu::gather_home(&self.gpu, stream, outs)
            }
        }
    }

    /// Build rows per device of a spread build (one entry on one device).
    pub fn device_rows(&self) -> Vec<u64> {
        match &self.prepared {
            Prepared::One(_) => vec![self.rows as u64],
            Prepared::Spread(s) => s.rows.clone(),
        }
    }
}
