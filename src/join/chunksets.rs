//! The out-of-core multi-GPU sort-merge join of Maltenberger et al. (PVLDB 2025,
//! `../shared/seeds/notes/003.md`): relations larger than the device set's memory, held in host
//! memory as key words and payload words (row ids or values), joined by the devices in turn.
//!
//! 1. Sort: each relation is cut into chunksets of g chunks of at most `chunk_rows` rows, one
//!    chunk per device. Each device sorts its chunk by the top [`DIGIT_BITS`] bits of the key
//!    words (one MSB radix pass); the digit counts are summed over the devices (the histogram
//!    all-gather) and dealt as contiguous digit ranges ([`Route::balanced`]); one all-to-all
//!    exchange over the peer links moves every range to its device, which sorts it on all 64
//!    bits and copies it back over the chunkset's place in host memory. The devices' sorted
//!    shares, in device order, are the chunkset sorted.
//! 2. Merge (only with several chunksets): the CPU merges the sorted chunksets, every thread an
//!    output range whose inputs a multi-sequence selection finds ([`multiway_merge`]).
//! 3. Join: merge-path partitioning on the CPU cuts sorted R and S into pairs of ranges of about
//!    equal combined length, each moved to the end of a run of equal keys so that no key
//!    straddles two pairs ([`merge_path_partitions`]); the devices take the pairs in turn, copy
//!    up their keys only, three pairs in flight per device on three streams, and find every S
//!    row's run of equal R keys (`smj_bounds`, a warp's binary searches narrowed to its range);
//!    the runs come back to host memory ([`Matches`]), from which the matching payload pairs are
//!    materialised on the CPU.
//!
//! Keys compare as unsigned 64-bit words, and equal words must be equal keys: the engine's narrow
//! key words (`primitives::keys`, mixed bijectively so that their top bits spread) are such
//! words. A hot key's rows stay on one device in the sort and in one pair in the join.
//!
//! What differs from the paper: a chunkset's upload, sort and download run one after another
//! (the paper overlaps one chunkset's download with the next one's upload on two streams), the
//! devices' shares of a chunkset are not padded or fused, boundary keys move the cut instead of
//! being matched on the CPU, and the join kernel reports each S row's run rather than each
//! distinct key's pair of runs.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use rayon::prelude::*;

use super::multi_gpu::{DIGIT_BITS, Route, on_each};
use super::smj;
use super::transform::Transformed;
use crate::device::registered::PinnedVec;
use crate::device::{DeviceBuffer, Gpu, peer};
use crate::error::{CudaResultExt, Result, gpu_error};
use crate::primitives::radix::{KeyWidth, ValueWidth, digit_boundaries, radix_sort_pairs};

const DIGITS: usize = 1 << DIGIT_BITS;
/// Device bytes a chunk row may need at the peak of the sort phase: the chunk's keys and values
/// and their sorted copy (32), and the received share while the chunk is still held (16).
const SORT_BYTES_PER_ROW: u64 = 48;
/// Join pairs in flight on each device (the paper's three streams).
pub const JOIN_STREAMS: usize = 3;

/// A relation in host memory: a key word and a payload word per row, page-locked for every
/// device of the set.
#[derive(Debug)]
pub struct HostRelation {
    pub keys: PinnedVec<u64>,
    pub values: PinnedVec<u64>,
}

impl HostRelation {
    /// Page-locks `keys` and `values` (one per row) for the devices of `gpu`'s process.
    pub fn new(gpu: &Gpu, keys: Vec<u64>, values: Vec<u64>) -> Result<HostRelation> {
        if keys.len() != values.len() {
            return Err(gpu_error(format!("a relation of {} keys and {} payloads", keys.len(), values.len())));
        }
        let ctx = gpu.context();
        Ok(HostRelation { keys: PinnedVec::new(ctx, keys), values: PinnedVec::new(ctx, values) })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The rows of a chunk on each device of a set of `devices` when every device has `available`
/// bytes: the sort phase's peak within 80% of it (the paper's utilisation limit), at most
/// 2^31 rows (a device's share must stay under 2^32 rows).
pub fn chunk_rows_for(available: u64) -> u64 {
    (available / 10 * 8 / SORT_BYTES_PER_ROW).clamp(1, 1 << 31)
}

/// Where the time of a chunkset join went.
#[derive(Debug, Clone, Default)]
pub struct ChunksetTimes {
    /// Chunksets of R and of S.
    pub chunksets: (usize, usize),
    /// Sorting the chunksets (upload, split, exchange, sort, download), both relations.
    pub sort: Duration,
    /// Of `sort`, the all-to-all exchanges between the devices.
    pub exchange: Duration,
    /// The CPU multiway merges (and page-locking their output).
    pub merge: Duration,
    /// Merge-path partitioning on the CPU.
    pub partition: Duration,
    /// The devices' matching of every pair, keys up and runs down.
    pub join: Duration,
}

/// Sorts `rel` in host memory over `set`: chunkset by chunkset, each over every device, then
/// merged on the CPU when there were several. Returns the sorted relation and the number of
/// chunksets.
pub fn sort_relation(
    set: &[Arc<Gpu>],
    rel: HostRelation,
    chunk_rows: u64,
    times: &mut ChunksetTimes,
) -> Result<(HostRelation, usize)> {
    let mut rel = rel;
    let n = rel.len();
    let per_set = (chunk_rows.max(1) as usize).saturating_mul(set.len().max(1));
    let mut runs = Vec::new();
    let t = Instant::now();
    let mut start = 0;
    while start < n {
        let end = (start + per_set).min(n);
        times.exchange += sort_chunkset(set, &mut rel.keys[start..end], &mut rel.values[start..end])?;
        runs.push(start..end);
        start = end;
    }
    times.sort += t.elapsed();
    if runs.len() <= 1 {
        return Ok((rel, runs.len()));
    }
    let t = Instant::now();
    let (keys, values) = multiway_merge(&rel.keys, &rel.values, &runs);
    drop(rel);
    let merged = HostRelation::new(&set[0], keys, values)?;
    times.merge += t.elapsed();
    Ok((merged, runs.len()))
}

/// One device's chunk after its digit pass: keys and values sorted by the top digit, and where
/// each digit starts.
struct Split {
    keys: DeviceBuffer,
    values: DeviceBuffer,
    starts: Vec<u32>,
}

/// Sorts one chunkset (`keys` and `values`, at most g chunks) across `set`, in place. Returns the
/// time of its exchange.
fn sort_chunkset(set: &[Arc<Gpu>], keys: &mut [u64], values: &mut [u64]) -> Result<Duration> {
    let (n, g) = (keys.len(), set.len());
    // Each device's chunk: uploaded, sorted by digit, its digit offsets read.
    let chunks: Vec<(&[u64], &[u64])> =
        (0..g).map(|d| (d * n / g)..((d + 1) * n / g)).map(|r| (&keys[r.clone()], &values[r])).collect();
    let splits = on_each(chunks, |d, (k, v)| split_chunk(&set[d], k, v))?;
    // The histogram all-gather, and the ranges the devices take.
    let mut counts = vec![0u64; DIGITS];
    for s in &splits {
        for (c, w) in counts.iter_mut().zip(s.starts.windows(2)) {
            *c += u64::from(w[1] - w[0]);
        }
    }
    let route = Route::balanced(&counts, g);
    let shares: Vec<usize> = (0..g).map(|d| route.digits(d)).map(|r| counts[r].iter().sum::<u64>() as usize).collect();
    // Each device's place in the sorted chunkset.
    let mut places = Vec::with_capacity(g);
    let (mut k_rest, mut v_rest) = (keys, values);
    for &rows in &shares {
        let (k, kr) = k_rest.split_at_mut(rows);
        let (v, vr) = v_rest.split_at_mut(rows);
        places.push((k, v));
        (k_rest, v_rest) = (kr, vr);
    }
    let t = Instant::now();
    let splits = &splits;
    let route = &route;
    let exchanged = on_each(places, |d, (k, v)| {
        let gpu = &set[d];
        let stream = gpu.stream();
        let rows = k.len();
        let mut rk = gpu.alloc(&stream, rows * 8, "chunkset keys received")?;
        let mut rv = gpu.alloc(&stream, rows * 8, "chunkset values received")?;
        let mut at = 0;
        for (from, s) in set.iter().zip(splits) {
            let digits = route.digits(d);
            let (lo, hi) = (s.starts[digits.start] as usize, s.starts[digits.end] as usize);
            let len = (hi - lo) * 8;
            peer::copy_between(from, &s.keys, lo * 8, gpu, &mut rk, at, len, &stream)?;
            peer::copy_between(from, &s.values, lo * 8, gpu, &mut rv, at, len, &stream)?;
            at += len;
        }
        if at != rows * 8 {
            return Err(gpu_error(format!("device {d} received {} chunkset rows, expected {rows}", at / 8)));
        }
        let exchanged = {
            stream.synchronize().gpu("exchanging a chunkset")?;
            t.elapsed()
        };
        let (sk, sv) = radix_sort_pairs(gpu, &stream, rk, rv, rows as u64, KeyWidth::U64, ValueWidth::U64, 0, 64)?;
        download(&stream, &sk, k)?;
        download(&stream, &sv, v)?;
        stream.synchronize().gpu("copying a sorted chunkset share back")?;
        Ok(exchanged)
    })?;
    Ok(exchanged.into_iter().max().unwrap_or_default())
}

/// Uploads one chunk to `gpu`, sorts it by the top digit of its keys and reads where each digit
/// starts.
fn split_chunk(gpu: &Arc<Gpu>, keys: &[u64], values: &[u64]) -> Result<Split> {
    let stream = gpu.stream();
    let n = keys.len();
    let k = upload(gpu, &stream, keys, "chunk keys")?;
    let v = upload(gpu, &stream, values, "chunk values")?;
    let shift = 64 - DIGIT_BITS;
    let (k, v) = radix_sort_pairs(gpu, &stream, k, v, n as u64, KeyWidth::U64, ValueWidth::U64, shift, 64)?;
    let starts = digit_boundaries(gpu, &stream, &k, n as u64, DIGIT_BITS, shift, KeyWidth::U64)?;
    let starts = gpu.read::<u32>(&stream, &starts, 0, DIGITS + 1)?;
    if starts.windows(2).any(|w| w[0] > w[1]) || starts[DIGITS] as usize != n {
        return Err(gpu_error(format!("chunk digit offsets do not cover its {n} rows")));
    }
    Ok(Split { keys: k, values: v, starts })
}

/// A device buffer holding a copy of `host` (queued on `stream`; `host` must stay unchanged
/// until the stream has done it).
fn upload(gpu: &Gpu, stream: &Arc<CudaStream>, host: &[u64], what: &str) -> Result<DeviceBuffer> {
    let buf = gpu.alloc(stream, host.len() * 8, what)?;
    if !host.is_empty() {
        // SAFETY: the buffer holds `host`'s bytes; the callers keep `host` borrowed until they
        // synchronise `stream`.
        unsafe { cudarc::driver::result::memcpy_htod_async(buf.raw_ptr(stream), host, stream.cu_stream()) }
            .gpu(format!("copying {} of {} bytes up", what, host.len() * 8))?;
    }
    Ok(buf)
}

/// Queues the copy of `buf`'s first `host.len()` items into `host` on `stream` (the callers
/// synchronise it before they let go of `host`).
fn download<T: Copy>(stream: &Arc<CudaStream>, buf: &DeviceBuffer, host: &mut [T]) -> Result<()> {
    let bytes = std::mem::size_of_val(host);
    if bytes > buf.len() {
        return Err(gpu_error(format!("copying {bytes} bytes down from a buffer of {}", buf.len())));
    }
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: `host` has room for the bytes, which the buffer holds; see above for the lifetime.
    unsafe { cudarc::driver::result::memcpy_dtoh_async(host, buf.raw_ptr(stream), stream.cu_stream()) }
        .gpu(format!("copying {bytes} bytes down"))
}

/// Merges the sorted `runs` of `keys` (with their `values`) into one sorted relation, in
/// parallel: every thread writes an output range whose inputs a multi-sequence selection finds.
pub fn multiway_merge(keys: &[u64], values: &[u64], runs: &[Range<usize>]) -> (Vec<u64>, Vec<u64>) {
    let n: usize = runs.iter().map(|r| r.len()).sum();
    let run_keys: Vec<&[u64]> = runs.iter().map(|r| &keys[r.clone()]).collect();
    let parts = (rayon::current_num_threads() * 4).clamp(1, n.max(1));
    let cuts: Vec<Vec<usize>> = (0..=parts).map(|i| select(&run_keys, i * n / parts)).collect();
    // Zeroed vectors come from fresh pages: no pass over them before the merge writes.
    let (mut out_k, mut out_v) = (vec![0u64; n], vec![0u64; n]);
    let mut outs = Vec::with_capacity(parts);
    let (mut k_rest, mut v_rest) = (out_k.as_mut_slice(), out_v.as_mut_slice());
    for i in 0..parts {
        let len = (i + 1) * n / parts - i * n / parts;
        let (k, kr) = k_rest.split_at_mut(len);
        let (v, vr) = v_rest.split_at_mut(len);
        outs.push((i, k, v));
        (k_rest, v_rest) = (kr, vr);
    }
    outs.into_par_iter().for_each(|(i, ok, ov)| {
        let inputs: Vec<(&[u64], &[u64])> = runs
            .iter()
            .enumerate()
            .map(|(j, r)| {
                let (lo, hi) = (r.start + cuts[i][j], r.start + cuts[i + 1][j]);
                (&keys[lo..hi], &values[lo..hi])
            })
            .filter(|(k, _)| !k.is_empty())
            .collect();
        merge_into(&inputs, ok, ov);
    });
    (out_k, out_v)
}

/// Positions in each sorted run such that the `rank` items before them are the smallest of all
/// the runs' items (ties taken from earlier runs first).
pub fn select(runs: &[&[u64]], rank: usize) -> Vec<usize> {
    let total: usize = runs.iter().map(|r| r.len()).sum();
    if rank == 0 {
        return vec![0; runs.len()];
    }
    if rank >= total {
        return runs.iter().map(|r| r.len()).collect();
    }
    let at_most = |v: u64| runs.iter().map(|r| r.partition_point(|x| *x <= v)).sum::<usize>();
    // The smallest key value with at least `rank` items at or below it.
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at_most(mid) >= rank { hi = mid } else { lo = mid + 1 }
    }
    let below: Vec<usize> = runs.iter().map(|r| r.partition_point(|x| *x < lo)).collect();
    let mut need = rank - below.iter().sum::<usize>();
    runs.iter()
        .zip(below)
        .map(|(r, b)| {
            let equal = r[b..].partition_point(|x| *x == lo);
            let take = equal.min(need);
            need -= take;
            b + take
        })
        .collect()
}

/// Merges sorted `inputs` into `keys` and `values` (exactly their total length).
fn merge_into(inputs: &[(&[u64], &[u64])], keys: &mut [u64], values: &mut [u64]) {
    match inputs {
        [] => {}
        [(k, v)] => {
            keys.copy_from_slice(k);
            values.copy_from_slice(v);
        }
        [(ak, av), (bk, bv)] => {
            let (mut i, mut j) = (0, 0);
            for o in 0..keys.len() {
                if j >= bk.len() || (i < ak.len() && ak[i] <= bk[j]) {
                    (keys[o], values[o]) = (ak[i], av[i]);
                    i += 1;
                } else {
                    (keys[o], values[o]) = (bk[j], bv[j]);
                    j += 1;
                }
            }
        }
        _ => {
            use std::cmp::Reverse;
            let mut heap: std::collections::BinaryHeap<Reverse<(u64, usize)>> = inputs
                .iter()
                .enumerate()
                .filter(|(_, (k, _))| !k.is_empty())
                .map(|(j, (k, _))| Reverse((k[0], j)))
                .collect();
            let mut at = vec![0usize; inputs.len()];
            for o in 0..keys.len() {
                let Some(Reverse((key, j))) = heap.pop() else { break };
                let (k, v) = inputs[j];
                (keys[o], values[o]) = (key, v[at[j]]);
                at[j] += 1;
                if at[j] < k.len() {
                    heap.push(Reverse((k[at[j]], j)));
                }
            }
        }
    }
}

/// Cuts sorted `r` and `s` into `parts` pairs of ranges (in order, covering both) of about equal
/// combined length: the merge path of the two is cut at equal distances, and each cut moved past
/// the run of keys equal to the last key before it, on both sides, so that every key's rows of
/// R and S lie in one pair. Pairs with an empty side are kept (an S range without R rows
/// matches nothing).
pub fn merge_path_partitions(r: &[u64], s: &[u64], parts: usize) -> Vec<(Range<usize>, Range<usize>)> {
    let parts = parts.max(1);
    let total = r.len() + s.len();
    let mut cuts = vec![(0usize, 0usize)];
    for i in 1..parts {
        let t = i * total / parts;
        let (a, b) = co_rank(r, s, t);
        let last = match (a, b) {
            (0, 0) => None,
            (0, b) => Some(s[b - 1]),
            (a, 0) => Some(r[a - 1]),
            (a, b) => Some(r[a - 1].max(s[b - 1])),
        };
        let cut = match last {
            None => (0, 0),
            Some(v) => (r.partition_point(|x| *x <= v), s.partition_point(|x| *x <= v)),
        };
        let prev = *cuts.last().unwrap_or(&(0, 0));
        cuts.push((cut.0.max(prev.0), cut.1.max(prev.1)));
    }
    cuts.push((r.len(), s.len()));
    cuts.windows(2).map(|w| (w[0].0..w[1].0, w[0].1..w[1].1)).collect()
}

/// The point where the merge path of `r` and `s` (R first on equal keys) crosses diagonal `t`:
/// `(a, b)` with `a + b = t`, the first `a` items of R and `b` of S being the merge's first `t`.
pub fn co_rank(r: &[u64], s: &[u64], t: usize) -> (usize, usize) {
    let (mut lo, mut hi) = (t.saturating_sub(s.len()), t.min(r.len()));
    while lo < hi {
        let a = lo + (hi - lo) / 2;
        let b = t - a;
        // R's next item goes before S's last taken one: more of R belongs in the first t.
        if b > 0 && r[a] <= s[b - 1] { lo = a + 1 } else { hi = a }
    }
    (lo, t - lo)
}

/// What the join phase found: for every row of sorted S, the run of equal keys in sorted R.
#[derive(Debug)]
pub struct Matches {
    /// The pairs of ranges of R and S the devices matched.
    pub pairs: Vec<(Range<usize>, Range<usize>)>,
    /// Per S row, where its run starts, from its pair's first R row.
    pub starts: PinnedVec<u32>,
    /// Per S row, the length of its run (its matches).
    pub counts: PinnedVec<u32>,
}

impl Matches {
    /// The number of matching (R, S) row pairs.
    pub fn rows(&self) -> u64 {
        self.counts.par_iter().map(|c| u64::from(*c)).sum()
    }

    /// The matching pairs' payloads (R's, S's), pair by pair, S row by S row.
    pub fn payloads(&self, r: &[u64], s: &[u64]) -> Vec<(u64, u64)> {
        self.pairs
            .par_iter()
            .flat_map_iter(|(rr, sr)| {
                sr.clone().flat_map(move |j| {
                    let at = rr.start + self.starts[j] as usize;
                    (at..at + self.counts[j] as usize).map(move |i| (r[i], s[j]))
                })
            })
            .collect()
    }
}

/// Finds the matches of sorted `r` and `s` (keys) on `set`: merge-path pairs of at most
/// `pair_rows` rows (at least [`JOIN_STREAMS`] per device), dealt to the devices in turn, each
/// device keeping three in flight on three streams.
pub fn match_sorted(
    set: &[Arc<Gpu>],
    r: &[u64],
    s: &[u64],
    pair_rows: u64,
    times: &mut ChunksetTimes,
) -> Result<Matches> {
    let g = set.len().max(1);
    let t = Instant::now();
    let total = (r.len() + s.len()) as u64;
    let parts = (total.div_ceil(pair_rows.max(1)) as usize).max(g * JOIN_STREAMS).div_ceil(g) * g;
    let pairs = merge_path_partitions(r, s, parts);
    times.partition += t.elapsed();
    let t = Instant::now();
    let ctx = set[0].context();
    let mut starts = PinnedVec::new(ctx, vec![0u32; s.len()]);
    let mut counts = PinnedVec::new(ctx, vec![0u32; s.len()]);
    // Every pair's output places, dealt to the devices in turn.
    let mut mine: Vec<Vec<(Range<usize>, Range<usize>, &mut [u32], &mut [u32])>> = (0..g).map(|_| Vec::new()).collect();
    let (mut st_rest, mut ct_rest) = (&mut starts[..], &mut counts[..]);
    for (i, (rr, sr)) in pairs.iter().enumerate() {
        let (st, str_) = st_rest.split_at_mut(sr.len());
        let (ct, ctr) = ct_rest.split_at_mut(sr.len());
        mine[i % g].push((rr.clone(), sr.clone(), st, ct));
        (st_rest, ct_rest) = (str_, ctr);
    }
    on_each(mine, |d, work| {
        let gpu = &set[d];
        let streams: Vec<Arc<CudaStream>> = (0..JOIN_STREAMS).map(|_| gpu.stream()).collect();
        for (j, (rr, sr, st, ct)) in work.into_iter().enumerate() {
            if rr.is_empty() || sr.is_empty() {
                continue;
            }
            let stream = &streams[j % JOIN_STREAMS];
            if rr.len() > u32::MAX as usize {
                return Err(gpu_error(format!("a join pair of {} R rows: at most 2^32 - 1", rr.len())));
            }
            let keys = upload(gpu, stream, &r[rr.clone()], "pair R keys")?;
            let build = Transformed { keys, perm: None, items: rr.len() as u64, columns: Vec::new() };
            let keys = upload(gpu, stream, &s[sr.clone()], "pair S keys")?;
            let probe = Transformed { keys, perm: None, items: sr.len() as u64, columns: Vec::new() };
            let (start, count) = smj::bounds(gpu, stream, &build, &probe, KeyWidth::U64)?;
            download(stream, &start, st)?;
            download(stream, &count, ct)?;
            // The device buffers are freed on their stream after the copies (stream-ordered),
            // so each stream holds one pair's memory at a time; the host places stay borrowed
            // until every stream is synchronised below.
        }
        for stream in &streams {
            stream.synchronize().gpu("matching join pairs")?;
        }
        Ok(())
    })?;
    times.join += t.elapsed();
    Ok(Matches { pairs, starts, counts })
}

/// The result of [`join`]: both relations sorted, and the matches between them.
#[derive(Debug)]
pub struct ChunksetJoin {
    /// Rows of a chunk on each device, as given or as the devices' free memory allowed.
    pub chunk_rows: u64,
    pub r: HostRelation,
    pub s: HostRelation,
    pub matches: Matches,
    pub times: ChunksetTimes,
}

/// Joins `r` and `s` (key words and payloads in host memory, any size the host holds) on the
/// devices of `set`: sorted chunkset by chunkset (chunks of `chunk_rows` rows per device, by
/// default as many as the smallest device's free memory allows), merged on the CPU, matched
/// pair by pair.
pub fn join(set: &[Arc<Gpu>], r: HostRelation, s: HostRelation, chunk_rows: Option<u64>) -> Result<ChunksetJoin> {
    if set.is_empty() {
        return Err(gpu_error("a chunkset join without devices"));
    }
    let chunk_rows =
        chunk_rows.unwrap_or_else(|| chunk_rows_for(set.iter().map(|g| g.memory().available()).min().unwrap_or(0)));
    let mut times = ChunksetTimes::default();
    let (r, kr) = sort_relation(set, r, chunk_rows, &mut times)?;
    let (s, ks) = sort_relation(set, s, chunk_rows, &mut times)?;
    times.chunksets = (kr, ks);
    // A pair's keys up and its runs down take 16 bytes a row of S and 8 of R, three pairs in
    // flight: a pair of the chunk's size stays well within what the sort phase used.
    let matches = match_sorted(set, &r.keys, &s.keys, chunk_rows, &mut times)?;
    Ok(ChunksetJoin { chunk_rows, r, s, matches, times })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn sorted(n: usize, distinct: u64, rng: &mut StdRng) -> Vec<u64> {
        let mut v: Vec<u64> = (0..n).map(|_| rng.random_range(0..distinct.max(1))).collect();
        v.sort_unstable();
        v
    }

    /// The multi-sequence selection splits at every rank so that all before are at most all
    /// after, and the parallel merge of random runs (ties, empty runs) equals a sort.
    #[test]
    fn multiway_merge_equals_a_sort() {
        let seed: u64 = rand::random();
        eprintln!("multiway merge seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        for case in 0..40 {
            let k = 1 + case % 6;
            let distinct = [3u64, 100, 1 << 40][case % 3];
            let mut keys = Vec::new();
            let mut runs = Vec::new();
            for _ in 0..k {
                let len = if rng.random_range(0..5) == 0 { 0 } else { rng.random_range(0..3000) };
                let run = sorted(len, distinct, &mut rng);
                runs.push(keys.len()..keys.len() + run.len());
                keys.extend(run);
            }
            let values: Vec<u64> = (0..keys.len() as u64).collect();
            let (mk, mv) = multiway_merge(&keys, &values, &runs);
            let mut want = keys.clone();
            want.sort_unstable();
            assert_eq!(mk, want, "seed {seed} case {case}");
            // Every value is its key's, once.
            let mut seen: Vec<u64> = mv.clone();
            seen.sort_unstable();
            assert_eq!(seen, values, "seed {seed} case {case}");
            assert!(mk.iter().zip(&mv).all(|(k, v)| keys[*v as usize] == *k), "seed {seed} case {case}");
            let run_keys: Vec<&[u64]> = runs.iter().map(|r| &keys[r.clone()]).collect();
            for rank in [0, 1, keys.len() / 3, keys.len()] {
                let at = select(&run_keys, rank);
                assert_eq!(at.iter().sum::<usize>(), rank.min(keys.len()));
                let before = run_keys.iter().zip(&at).filter_map(|(r, a)| a.checked_sub(1).map(|i| r[i])).max();
                let after = run_keys.iter().zip(&at).filter_map(|(r, a)| r.get(*a).copied()).min();
                if let (Some(b), Some(a)) = (before, after) {
                    assert!(b <= a, "seed {seed} case {case} rank {rank}");
                }
            }
        }
    }

    /// Merge-path pairs cover both sides in order, never split a key between pairs, and stay
    /// near equal length when keys are distinct.
    #[test]
    fn merge_path_pairs_keep_every_key_in_one_pair() {
        let seed: u64 = rand::random();
        eprintln!("merge path seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        for case in 0..60 {
            let distinct = [1u64, 5, 1000, 1 << 50][case % 4];
            let r = sorted(rng.random_range(0..2000), distinct, &mut rng);
            let s = sorted(rng.random_range(0..2000), distinct, &mut rng);
            let parts = 1 + case % 9;
            let pairs = merge_path_partitions(&r, &s, parts);
            assert_eq!(pairs.len(), parts);
            assert_eq!(pairs[0].0.start, 0);
            assert_eq!(pairs[0].1.start, 0);
            assert_eq!(pairs[parts - 1].0.end, r.len());
            assert_eq!(pairs[parts - 1].1.end, s.len());
            for w in pairs.windows(2) {
                assert_eq!(w[0].0.end, w[1].0.start);
                assert_eq!(w[0].1.end, w[1].1.start);
                let last = w[0].0.clone().map(|i| r[i]).chain(w[0].1.clone().map(|i| s[i])).max();
                let first = w[1].0.clone().map(|i| r[i]).chain(w[1].1.clone().map(|i| s[i])).min();
                if let (Some(l), Some(f)) = (last, first) {
                    assert!(l < f, "seed {seed} case {case}: key {l} straddles a cut");
                }
            }
            if distinct == 1 << 50 {
                let fair = (r.len() + s.len()) / parts + 2;
                assert!(pairs.iter().all(|(a, b)| a.len() + b.len() <= fair), "seed {seed} case {case}");
            }
        }
    }

    #[test]
    fn co_rank_takes_r_first_on_ties() {
        let (r, s) = ([1u64, 2, 2, 5], [2u64, 2, 3]);
        assert_eq!(co_rank(&r, &s, 0), (0, 0));
        assert_eq!(co_rank(&r, &s, 3), (3, 0));
        assert_eq!(co_rank(&r, &s, 4), (3, 1));
        assert_eq!(co_rank(&r, &s, 7), (4, 3));
    }
    /// The chunkset join on 1, 2 and 4 logical devices of one GPU, against a CPU join of the
    /// same pairs: chunk sizes that give one chunkset and several (so the CPU merge runs),
    /// unique, duplicate, skewed (a third of the rows on one key) and disjoint keys, empty sides.
    #[test]
    fn gpu_chunkset_join_matches_a_cpu_join_on_logical_devices() {
        use crate::config::{DevicesSetting, GpuConfig};
        use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip};
        use std::collections::HashMap;
        let _l = gpu_lock();
        let test = "gpu_chunkset_join_matches_a_cpu_join_on_logical_devices";
        let Some(_gpu) = gpu_or_skip(test) else { return };
        let seed = fresh_seed(test);
        let mut rng = StdRng::seed_from_u64(seed);
        // A bijection of u64 (splitmix64's finaliser), as the engine's key words are mixed.
        let mix = |mut x: u64| {
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        let mut joins = 0;
        for devices in [vec![0], vec![0, 0], vec![0, 0, 0, 0]] {
            let cfg = GpuConfig { devices: DevicesSetting::List(devices.clone()), ..GpuConfig::default() };
            let set = Gpu::for_config(&cfg).expect("a device set").device_set();
            for (shape, nr, ns, domain) in [
                ("unique", 20_000usize, 30_000usize, 0u64),
                ("duplicates", 25_000, 25_000, 3_000),
                ("skewed", 10_000, 40_000, 500),
                ("disjoint", 5_000, 5_000, 1 << 40),
                ("empty r", 0, 1_000, 100),
                ("empty s", 1_000, 0, 100),
            ] {
                let key = |rng: &mut StdRng, i: usize, side: u64| -> u64 {
                    match shape {
                        "unique" => mix(i as u64),
                        "skewed" if rng.random_range(0..3) == 0 => mix(7),
                        "disjoint" => mix(rng.random_range(0..domain) * 2 + side),
                        _ => mix(rng.random_range(0..domain)),
                    }
                };
                let rk: Vec<u64> = (0..nr).map(|i| key(&mut rng, i, 0)).collect();
                let sk: Vec<u64> = (0..ns)
                    .map(|i| {
                        if shape == "unique" { mix(rng.random_range(0..nr.max(1)) as u64) } else { key(&mut rng, i, 1) }
                    })
                    .collect();
                let rv: Vec<u64> = (0..nr as u64).collect();
                let sv: Vec<u64> = (0..ns as u64).map(|i| i + (1 << 32)).collect();
                let mut by_key: HashMap<u64, Vec<u64>> = HashMap::new();
                for (k, v) in rk.iter().zip(&rv) {
                    by_key.entry(*k).or_default().push(*v);
                }
                let mut want: Vec<(u64, u64)> = sk
                    .iter()
                    .zip(&sv)
                    .flat_map(|(k, v)| by_key.get(k).into_iter().flatten().map(move |r| (*r, *v)))
                    .collect();
                want.sort_unstable();
                for chunk_rows in [1_000_000u64, 3_001] {
                    let what = format!("seed {seed} devices {devices:?} {shape} {nr}x{ns} chunk {chunk_rows}");
                    let r = HostRelation::new(&set[0], rk.clone(), rv.clone()).unwrap();
                    let s = HostRelation::new(&set[0], sk.clone(), sv.clone()).unwrap();
                    let out = join(&set, r, s, Some(chunk_rows)).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(out.r.keys.windows(2).all(|w| w[0] <= w[1]), "{what}: R not sorted");
                    assert!(out.s.keys.windows(2).all(|w| w[0] <= w[1]), "{what}: S not sorted");
                    let per_set = chunk_rows as usize * devices.len();
                    assert_eq!(out.times.chunksets, (nr.div_ceil(per_set), ns.div_ceil(per_set)), "{what}");
                    assert_eq!(out.matches.rows(), want.len() as u64, "{what}: match count");
                    let mut got = out.matches.payloads(&out.r.values, &out.s.values);
                    got.sort_unstable();
                    assert!(got == want, "{what}: the matching pairs differ from the CPU join's");
                    joins += 1;
                }
            }
        }
        eprintln!("chunkset join differential: {joins} joins matched the CPU (seed {seed})");
    }
}
