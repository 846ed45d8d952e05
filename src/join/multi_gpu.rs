//! The multi-GPU sort-merge join: the radix-partitioning variant of Maltenberger et al.'s HMG
//! SMJ (PVLDB 2025, `../shared/seeds/notes/003.md`) over the devices of a session's set.
//!
//! Each input part is split on the device that holds it: its key words' top [`DIGIT_BITS`]
//! bits (an MSB radix digit; narrow keys are mixed bijectively and wide keys hashed, so digits
//! spread whatever the key type) are counted and its rows sorted by digit. The build's digit
//! counts are gathered from every device (the histogram all-gather), and contiguous digit
//! ranges are dealt to the devices so that each holds about the same number of build rows (the
//! bucket distribution). One all-to-all exchange then moves every device's rows of each range
//! to the range's device over the peer links, where the rows are sorted on all key bits and
//! joined by the single-GPU sort-merge join with GFTR materialisation. Probe parts follow the
//! build's ranges, so every key meets all its matches on one device: each device's answer is
//! final for its rows, for every join type, and the concatenation of the devices' sorted
//! sides is sorted globally (by key word).
//!
//! What differs from the paper: the inputs are a query's device batches rather than chunksets
//! of host memory (the chunkset form is [`super::chunksets`], not yet used by the SQL path: a
//! query's join too large for the set's memory runs out of core, `join::triton`, its partitions
//! dealt over the set's devices), a range's rows are never split between devices (one hot key stays
//! on one device), and the per-device match is `smj_bounds` (a binary search per warp) rather
//! than a merge path.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;

use super::{JoinAlgorithm, JoinBuild, JoinSpec, PhaseTimes, key_columns};
use crate::columns::{DeviceBatch, DeviceColumn};
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{CudaResultExt, Result, gpu_error};
use crate::primitives::keys::{prepare_keys, row_digits};
use crate::primitives::materialize::{GatherSpec, gather_columns, null_column};
use crate::primitives::radix::{KeyWidth, ValueWidth, boundaries, radix_sort_pairs};
use crate::primitives::select::iota;

/// Bits of the MSB digit that ranges are made of (256 digits, as in the paper).
pub const DIGIT_BITS: u32 = 8;
const DIGITS: usize = 1 << DIGIT_BITS;

/// Which device holds each digit's rows: contiguous digit ranges, one per device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Device `d` holds digits `cuts[d]..cuts[d + 1]`.
    cuts: Vec<usize>,
}

impl Route {
    /// Ranges over `devices` that give each about the same share of `counts` (rows per digit,
    /// summed over every device): each range in turn takes digits until it holds the rows left
    /// over the devices left, keeping a digit for each later device. With no rows the digits
    /// are dealt evenly.
    pub fn balanced(counts: &[u64], devices: usize) -> Route {
        let devices = devices.max(1);
        let n = counts.len();
        let mut cuts = vec![0usize];
        if counts.iter().all(|c| *c == 0) {
            cuts.extend((1..devices).map(|d| d * n / devices));
        } else {
            let mut start = 0;
            for k in 0..devices - 1 {
                let left = (devices - k) as u128;
                let remaining: u128 = counts[start..].iter().map(|c| *c as u128).sum();
                let last = n.saturating_sub(devices - k - 1).max(start);
                let (mut end, mut held) = (start, 0u128);
                while end < last && (held * left < remaining || end == start) {
                    held += counts[end] as u128;
                    end += 1;
                }
                cuts.push(end);
                start = end;
            }
        }
        cuts.push(n);
        Route { cuts }
    }

    pub fn devices(&self) -> usize {
        self.cuts.len() - 1
    }

    /// The digits device `d` holds.
    pub fn digits(&self, d: usize) -> Range<usize> {
        self.cuts[d]..self.cuts[d + 1]
    }
}

/// One input part's rows sorted by digit on its device: row ids in digit order and where each
/// digit starts (`DIGITS + 1` offsets).
struct Split {
    ids: DeviceBuffer,
    starts: Vec<u32>,
}

impl Split {
    fn counts(&self) -> Vec<u64> {
        self.starts.windows(2).map(|w| (w[1] - w[0]) as u64).collect()
    }

    /// The rows of `digits`, a range of the sorted ids.
    fn rows(&self, digits: Range<usize>) -> Range<usize> {
        self.starts[digits.start] as usize..self.starts[digits.end] as usize
    }
}

/// Sorts `batch`'s rows by the digit of their key (rows without a key word, NULL keys that
/// match nothing, take digit 0: every device's part of them ends on one device, which outputs
/// them as its outer or anti rows).
fn split(spec: &JoinSpec, batch: &DeviceBatch, key_idx: &[usize]) -> Result<Split> {
    let (gpu, stream) = (batch.gpu(), batch.stream());
    let rows = batch.num_rows() as u64;
    if rows > u32::MAX as u64 {
        return Err(gpu_error(format!("a multi-GPU join part of {rows} rows: at most 2^32 - 1")));
    }
    if rows == 0 {
        return Ok(Split { ids: gpu.alloc(stream, 0, "multi-GPU join rows")?, starts: vec![0; DIGITS + 1] });
    }
    let cols = key_columns(batch, key_idx)?;
    let keys = prepare_keys(gpu, stream, &spec.keys, &cols, rows)?;
    let digit = row_digits(gpu, stream, &keys, spec.keys.encoding.width(), DIGIT_BITS)?;
    drop(keys);
    let ids = iota(gpu, stream, rows)?;
    let (sorted, ids) = radix_sort_pairs(gpu, stream, digit, ids, rows, KeyWidth::U32, ValueWidth::U32, 0, DIGIT_BITS)?;
    let starts = boundaries(gpu, stream, &sorted, rows, DIGIT_BITS, KeyWidth::U32)?;
    let starts = gpu.read::<u32>(stream, &starts, 0, DIGITS + 1)?;
    if starts.windows(2).any(|w| w[0] > w[1]) || starts[DIGITS] as u64 != rows {
        return Err(gpu_error(format!("multi-GPU join digit offsets do not cover the {rows} rows")));
    }
    Ok(Split { ids, starts })
}

/// A batch of `batch`'s schema with no rows, on device `gpu`.
fn empty_batch(gpu: &Arc<Gpu>, like: &DeviceBatch) -> Result<DeviceBatch> {
    let stream = gpu.stream();
    let columns = like
        .schema()
        .fields()
        .iter()
        .map(|f| null_column(gpu, &stream, f.data_type(), 0).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    stream.synchronize().gpu("making an empty batch")?;
    DeviceBatch::try_new(Arc::clone(like.schema()), columns, 0, Arc::clone(gpu), stream)
}

/// The rows `rows` of the split `batch` (in digit order), gathered on its device.
fn gather_piece(batch: &DeviceBatch, split: &Split, rows: Range<usize>) -> Result<DeviceBatch> {
    let (gpu, stream) = (batch.gpu(), batch.stream());
    let n = rows.len();
    let mut ids = gpu.alloc(stream, n * 4, "multi-GPU join piece rows")?;
    crate::device::peer::copy_between(gpu, &split.ids, rows.start * 4, gpu, &mut ids, 0, n * 4, stream)?;
    let specs =
        batch.columns().iter().map(|c| GatherSpec::Rows { col: c.as_ref(), rows: &ids, may_be_null: false }).collect();
    let cols: Vec<DeviceColumn> = gather_columns(gpu, stream, specs, n as u64)?;
    DeviceBatch::try_new(
        Arc::clone(batch.schema()),
        cols.into_iter().map(Arc::new).collect(),
        n,
        Arc::clone(gpu),
        Arc::clone(stream),
    )
}

/// Runs `f(i, item)` for every item on a thread of its own (one per device), returning the
/// results in order; the first error wins.
pub(crate) fn on_each<T: Send, R: Send>(items: Vec<T>, f: impl Fn(usize, T) -> Result<R> + Sync) -> Result<Vec<R>> {
    if items.len() == 1 {
        return items.into_iter().enumerate().map(|(i, t)| f(i, t)).collect();
    }
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> =
            items.into_iter().enumerate().map(|(i, t)| scope.spawn(move || f(i, t))).collect::<Vec<_>>();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(gpu_error("a multi-GPU join thread panicked"))))
            .collect()
    })
}

/// Deals the rows of `parts` (batches on devices of `set`) to `route`'s devices: each part is
/// split on its device, its pieces copied to their devices (the all-to-all exchange), and each
/// device's pieces concatenated there. `splits` are the parts' splits when already made.
fn exchange(
    set: &[Arc<Gpu>],
    spec: &JoinSpec,
    key_idx: &[usize],
    route: &Route,
    parts: &[DeviceBatch],
    splits: Option<Vec<Split>>,
) -> Result<Vec<DeviceBatch>> {
    let splits = match splits {
        Some(s) => s,
        None => on_each(parts.iter().collect(), |_, p| split(spec, p, key_idx))?,
    };
    // Every part's pieces, made on the part's device (one thread per part).
    let pieces: Vec<Vec<Option<DeviceBatch>>> = on_each(parts.iter().zip(&splits).collect(), |_, (p, s)| {
        (0..route.devices())
            .map(|d| {
                let rows = s.rows(route.digits(d));
                if rows.is_empty() { Ok(None) } else { gather_piece(p, s, rows).map(Some) }
            })
            .collect()
    })?;
    // Each device receives its pieces and concatenates them.
    let like = parts.first().ok_or_else(|| gpu_error("a multi-GPU join exchange without input"))?;
    on_each(set.iter().collect(), |d, gpu| {
        let mine: Vec<DeviceBatch> =
            pieces.iter().filter_map(|p| p[d].as_ref()).map(|b| b.to_device(gpu)).collect::<Result<_>>()?;
        match mine.len() {
            0 => empty_batch(gpu, like),
            _ => {
                let stream = gpu.stream();
                let out = DeviceBatch::concat(gpu, &stream, Arc::clone(like.schema()), &mine)?;
                out.stream().synchronize().gpu("concatenating a device's pieces")?;
                Ok(out)
            }
        }
    })
}

/// A build side spread over a device set: its route and each device's prepared share.
#[derive(Debug)]
pub struct SpreadBuild {
    set: Vec<Arc<Gpu>>,
    route: Route,
    /// The single-device spec each device joins with.
    spec: Arc<JoinSpec>,
    builds: Vec<JoinBuild>,
    /// Build rows per device.
    pub rows: Vec<u64>,
    /// Time spent splitting and exchanging the build.
    pub exchange: Duration,
}

/// The spec each device of a multi-GPU join runs: the single-GPU sort-merge join with GFTR.
pub fn device_spec(spec: &JoinSpec) -> JoinSpec {
    JoinSpec { algorithm: JoinAlgorithm::SmjGftr, ..spec.clone() }
}

impl SpreadBuild {
    /// Spreads the build `parts` (batches on devices of `set`) over `set` and prepares each
    /// device's share (`spec` must be a single-device algorithm's, see [`device_spec`]).
    pub fn new(set: &[Arc<Gpu>], spec: Arc<JoinSpec>, parts: Vec<DeviceBatch>) -> Result<SpreadBuild> {
        if spec.algorithm.multi_gpu() || spec.null_aware || spec.ordered {
            return Err(gpu_error("a multi-GPU join's devices run smj_gftr, without NOT IN or ordered output"));
        }
        let t = Instant::now();
        let splits = on_each(parts.iter().collect(), |_, p| split(&spec, p, &spec.build_keys))?;
        // The histogram all-gather: every part's digit counts, summed on the host.
        let mut counts = vec![0u64; DIGITS];
        for s in &splits {
            for (c, n) in counts.iter_mut().zip(s.counts()) {
                *c += n;
            }
        }
        let route = Route::balanced(&counts, set.len());
        let shares = exchange(set, &spec, &spec.build_keys, &route, &parts, Some(splits))?;
        drop(parts);
        let exchange = t.elapsed();
        let rows = shares.iter().map(|b| b.num_rows() as u64).collect();
        let builds = on_each(shares, |d, batch| {
            let gpu = &set[d];
            let stream = batch.stream().clone();
            JoinBuild::new(Arc::clone(gpu), &stream, Arc::clone(&spec), batch)
        })?;
        Ok(SpreadBuild { set: set.to_vec(), route, spec, builds, rows, exchange })
    }

    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The devices' build phase times, each phase the slowest device's.
    pub fn times(&self) -> PhaseTimes {
        slowest(self.builds.iter().map(|b| b.times))
    }

    /// Joins probe `parts` (batches on devices of the set): each part's rows go to the devices
    /// of their digits and are probed there, each output batch handed to `sink` with its
    /// device's index, on that device's thread, as it is made.
    pub fn probe_each(
        &self,
        parts: Vec<DeviceBatch>,
        times: &mut PhaseTimes,
        sink: &(dyn Fn(usize, DeviceBatch) -> Result<()> + Sync),
    ) -> Result<()> {
        let t = Instant::now();
        let shares = exchange(&self.set, &self.spec, &self.spec.probe_keys, &self.route, &parts, None)?;
        drop(parts);
        times.exchange += t.elapsed();
        let sync = times.synchronized;
        let phases = on_each(shares, |d, chunk| {
            let mut own = PhaseTimes { synchronized: sync, ..PhaseTimes::default() };
            if chunk.num_rows() > 0 {
                let stream = Arc::clone(chunk.stream());
                self.builds[d].probe_into(&stream, &chunk, &mut own, &mut |b| sink(d, b))?;
            }
            Ok(own)
        })?;
        times.add(&slowest(phases.into_iter()));
        Ok(())
    }

    /// [`Self::probe_each`], returning each device's output batches (on it).
    pub fn probe(&self, parts: Vec<DeviceBatch>, times: &mut PhaseTimes) -> Result<Vec<Vec<DeviceBatch>>> {
        let outs: Vec<std::sync::Mutex<Vec<DeviceBatch>>> =
            self.set.iter().map(|_| std::sync::Mutex::new(Vec::new())).collect();
        self.probe_each(parts, times, &|d, b| {
            outs[d].lock().map_err(|_| gpu_error("a multi-GPU join's output lock was poisoned"))?.push(b);
            Ok(())
        })?;
        outs.into_iter()
            .map(|m| m.into_inner().map_err(|_| gpu_error("a multi-GPU join's output lock was poisoned")))
            .collect()
    }

    /// Each device's build rows the join type emits at the end (outer, semi, anti, mark).
    pub fn finish(&self, times: &mut PhaseTimes) -> Result<Vec<Vec<DeviceBatch>>> {
        let outs = on_each(self.builds.iter().collect(), |d, b| {
            let mut own = PhaseTimes { synchronized: true, ..PhaseTimes::default() };
            let out = b.finish(&self.set[d].stream(), &mut own)?;
            Ok((out, own))
        })?;
        let (outs, phases): (Vec<_>, Vec<_>) = outs.into_iter().unzip();
        times.add(&slowest(phases.into_iter()));
        Ok(outs)
    }
}

/// Phase times whose every phase is the slowest device's (the devices run side by side).
fn slowest(times: impl Iterator<Item = PhaseTimes>) -> PhaseTimes {
    let mut out = PhaseTimes::default();
    for t in times {
        out.synchronized |= t.synchronized;
        out.keys = out.keys.max(t.keys);
        out.transform = out.transform.max(t.transform);
        out.matching = out.matching.max(t.matching);
        out.materialize = out.materialize.max(t.materialize);
        out.exchange = out.exchange.max(t.exchange);
    }
    out
}

/// Moves every device's output batches to `home` (on `stream`), in device order.
pub fn gather_home(home: &Arc<Gpu>, stream: &Arc<CudaStream>, outs: Vec<Vec<DeviceBatch>>) -> Result<Vec<DeviceBatch>> {
    let mut all = Vec::new();
    for b in outs.into_iter().flatten() {
        let moved = b.to_device(home)?;
        // A moved batch is complete; one already home stays ordered on its own stream.
        all.push(if b.gpu().same_device(home) { moved } else { moved.on_stream(Arc::clone(stream)) });
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(r: &Route) -> Vec<usize> {
        (0..r.devices()).map(|d| r.digits(d).len()).collect()
    }

    /// Uniform digits deal evenly; the ranges cover every digit once, in order.
    #[test]
    fn a_uniform_histogram_is_dealt_evenly() {
        for devices in [1, 2, 3, 4, 8] {
            let r = Route::balanced(&[10; DIGITS], devices);
            assert_eq!(r.devices(), devices);
            assert_eq!(r.digits(0).start, 0);
            assert_eq!(r.digits(devices - 1).end, DIGITS);
            for d in 1..devices {
                assert_eq!(r.digits(d - 1).end, r.digits(d).start);
            }
            let l = lens(&r);
            assert!(l.iter().max().unwrap() - l.iter().min().unwrap() <= 1, "{devices} devices: {l:?}");
        }
    }

    /// Skewed counts: each device's rows stay near the fair share, a hot digit stays whole on one
    /// device, and empty inputs still give every device a range.
    #[test]
    fn a_skewed_histogram_is_balanced_by_rows() {
        let mut counts = vec![1u64; DIGITS];
        counts[3] = 1000;
        counts[200] = 500;
        let r = Route::balanced(&counts, 4);
        let rows: Vec<u64> = (0..4).map(|d| counts[r.digits(d)].iter().sum()).collect();
        assert_eq!(rows.iter().sum::<u64>(), counts.iter().sum::<u64>());
        assert!(r.digits(0).contains(&3) && r.digits(0).end <= 4, "{r:?}");
        assert!(rows[0] >= 1000, "{rows:?}");
        let empty = Route::balanced(&[0; DIGITS], 3);
        assert_eq!(lens(&empty), vec![85, 85, 86]);
        let all_in_one = Route::balanced(
            &{
                let mut c = vec![0u64; DIGITS];
                c[0] = 7;
                c
            },
            2,
        );
        assert_eq!(all_in_one.digits(0), 0..1);
        assert_eq!(all_in_one.digits(1), 1..DIGITS);
    }
}
