//! Host <-> device copies, always through pinned memory.
//!
//! Upload: host bytes are copied by several threads into one of two pinned staging slots while
//! the DMA engine drains the other (double buffering); small pieces share a slot. Download: the
//! device writes straight into pooled pinned blocks that become the Arrow buffers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys};
use datafusion::arrow::buffer::{Buffer, MutableBuffer};

use super::memory::DeviceBuffer;
use super::pinned::{PinnedBlock, PinnedPool};
use super::registered::HostRegistry;
use crate::error::{CudaResultExt, Result, gpu_error};

/// Copies are cut into tasks of at most this many bytes, spread over the copy pool's threads.
const COPY_TASK_BYTES: usize = 2 << 20;

/// Copies each `(src, dst)` pair on `pool`'s threads (on the caller's thread when small).
///
/// # Safety
/// Every `dst` must be valid for `src.len()` bytes of writes and not overlap another `dst` or
/// any `src`.
pub(crate) unsafe fn parallel_copy(pool: &rayon::ThreadPool, pieces: &[(&[u8], *mut u8)]) {
    let staged: Vec<StageCopy> = pieces.iter().map(|&(src, dst)| StageCopy { src, dst, narrow: None }).collect();
    unsafe { parallel_stage(pool, &staged) };
}

/// One host copy into a staging slot: `src` as it is, or (`narrow`) its 16-byte little-endian
/// integers as their low 8 bytes, clearing the flag when one of them does not fit in 8 bytes.
struct StageCopy<'a> {
    src: &'a [u8],
    dst: *mut u8,
    narrow: Option<&'a AtomicBool>,
}

/// Runs the copies on `pool`'s threads (on the caller's thread when small).
///
/// # Safety
/// Every `dst` must be valid for writes of the bytes its copy produces (`src.len()`, half of it
/// when narrowed) and not overlap another `dst` or any `src`.
unsafe fn parallel_stage(pool: &rayon::ThreadPool, copies: &[StageCopy<'_>]) {
    let total: usize = copies.iter().map(|c| c.src.len()).sum();
    if total <= COPY_TASK_BYTES || pool.current_num_threads() <= 1 {
        for c in copies {
            unsafe { stage_one(c.src, c.dst, c.narrow) };
        }
        return;
    }
    // Destinations travel as addresses: raw pointers are not Send. A task's source is a
    // multiple of 16 bytes, so narrowed tasks start on a value.
    let tasks: Vec<(&[u8], usize, Option<&AtomicBool>)> = copies
        .iter()
        .flat_map(|c| {
            let shrink = if c.narrow.is_some() { 2 } else { 1 };
            c.src
                .chunks(COPY_TASK_BYTES)
                .enumerate()
                .map(move |(i, part)| (part, c.dst as usize + i * COPY_TASK_BYTES / shrink, c.narrow))
        })
        .collect();
    use rayon::prelude::*;
    pool.install(|| tasks.par_iter().for_each(|&(src, dst, narrow)| unsafe { stage_one(src, dst as *mut u8, narrow) }));
}

/// # Safety
/// As [`parallel_stage`], for one copy.
unsafe fn stage_one(src: &[u8], dst: *mut u8, narrow: Option<&AtomicBool>) {
    match narrow {
        None => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) },
        Some(fits) => {
            if !unsafe { narrow_copy(src, dst) } {
                fits.store(false, Ordering::Relaxed);
            }
        }
    }
}

/// Writes the low 8 bytes of each 16-byte little-endian integer of `src` to `dst`; whether every
/// value fits in 8 bytes (its high half is the sign extension of its low half). The values are
/// written either way.
///
/// # Safety
/// `dst` must be valid for `src.len() / 2` bytes of writes and not overlap `src`.
unsafe fn narrow_copy(src: &[u8], dst: *mut u8) -> bool {
    let values = src.len() / 16;
    let from = src.as_ptr() as *const [u64; 2];
    let to = dst as *mut u64;
    let mut off_range = 0u64;
    for i in 0..values {
        // SAFETY: `i < values` keeps both the read and the write in bounds; neither needs alignment.
        let [lo, hi] = unsafe { from.add(i).read_unaligned() };
        off_range |= hi ^ (((lo as i64) >> 63) as u64);
        unsafe { to.add(i).write_unaligned(lo) };
    }
    off_range == 0
}

/// Two pinned staging slots and, per slot, an event marking the end of the DMA out of it.
#[derive(Debug)]
pub struct StagingRing {
    slots: [PinnedBlock; 2],
    done: [CudaEvent; 2],
    pending: [bool; 2],
}

impl StagingRing {
    pub fn new(pool: &Arc<PinnedPool>, ctx: &Arc<CudaContext>, slot_bytes: usize) -> Result<Self> {
        let event = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).gpu("creating a staging event");
        Ok(StagingRing {
            slots: [pool.alloc(slot_bytes)?, pool.alloc(slot_bytes)?],
            done: [event()?, event()?],
            pending: [false, false],
        })
    }

    pub fn slot_bytes(&self) -> usize {
        self.slots[0].capacity().min(self.slots[1].capacity())
    }

    /// Waits until the DMA out of `slot` has finished.
    fn wait(&mut self, slot: usize) -> Result<()> {
        if std::mem::take(&mut self.pending[slot]) {
            self.done[slot].synchronize().gpu("waiting for a staging copy")?;
        }
        Ok(())
    }

    /// Waits until the DMA out of every slot has finished.
    pub fn drain(&mut self) -> Result<()> {
        self.wait(0)?;
        self.wait(1)
    }
}

/// One piece of an upload: a host buffer into a device buffer at a byte offset.
pub struct UploadPiece<'a> {
    pub src: &'a Buffer,
    pub dst: &'a DeviceBuffer,
    pub dst_offset: usize,
    /// For 16-byte integers (Decimal128 values) that may cross the link as 8-byte ones: a device
    /// buffer of half `dst`'s size. If this piece goes through the staging buffers, its values
    /// are narrowed while they are staged and land in this buffer at `dst_offset / 2`, for
    /// the caller to widen into `dst` (see [`Landed`]). A piece copied straight from
    /// page-locked memory lands in `dst` as it is.
    pub narrow: Option<&'a DeviceBuffer>,
}

impl<'a> UploadPiece<'a> {
    /// `src` into `dst` at `dst_offset`, as it is.
    pub fn new(src: &'a Buffer, dst: &'a DeviceBuffer, dst_offset: usize) -> Self {
        UploadPiece { src, dst, dst_offset, narrow: None }
    }
}

/// Where an upload put a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// In `dst`, as it is.
    Wide,
    /// Narrowed, in the piece's `narrow` buffer: every value fitted in 8 bytes.
    Narrow,
    /// Narrowed, but some value did not fit in 8 bytes: the piece must be uploaded again as it is.
    Overflow,
}

/// Whether narrowed pieces are possible here: the narrowing reads integers as little-endian.
pub const NARROWING: bool = cfg!(target_endian = "little");

/// A copy gathered into a staging slot: host bytes, their place in the slot, the device address
/// they go to and the base of that device buffer; `narrow` for values narrowed on the way.
struct Staged<'a> {
    src: &'a [u8],
    slot_offset: usize,
    dptr: sys::CUdeviceptr,
    buffer: sys::CUdeviceptr,
    narrow: Option<&'a AtomicBool>,
}

impl Staged<'_> {
    /// Bytes this copy takes in the slot and on the link.
    fn staged_len(&self) -> usize {
        if self.narrow.is_some() { self.src.len() / 2 } else { self.src.len() }
    }
}

/// Copies every piece to the device on `stream`: straight from host memory for buffers in
/// `pool`'s pinned memory or that the `registry` (when given) has page-locked, through `ring` otherwise,
/// `threads` filling the staging slots. Returns when the host bytes are no longer needed (they
/// are all in pinned memory that stays allocated, or already on the device); the device copies
/// may still be in flight on `stream`. Returns where each piece landed: pieces with a `narrow`
/// buffer that went through the staging slots crossed the link at half their size.
pub fn upload(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    registry: Option<&HostRegistry>,
    pool: &PinnedPool,
    pieces: &[UploadPiece<'_>],
    threads: &rayon::ThreadPool,
) -> Result<Vec<Landed>> {
    let slot_bytes = ring.slot_bytes();
    let ctx = stream.context();
    ctx.bind_to_thread().gpu("binding the CUDA context")?;
    let fits: Vec<AtomicBool> = pieces.iter().map(|_| AtomicBool::new(true)).collect();
    let mut landed = vec![Landed::Wide; pieces.len()];
    // The copies gathered in the current slot.
    let mut batch: Vec<Staged<'_>> = Vec::new();
    let mut fill = 0usize;
    let mut slot = 0usize;
    // Pool blocks go back to the pool when their buffer is dropped, which the caller may do as
    // soon as this returns: copies straight from them are waited for. Held blocks (pinned
    // tables) are freed only after the context's work has finished, so copies from them are not.
    let mut direct_from_pool = false;
    // Direct copies from one pinned allocation that lie end to end on both sides (the batches of
    // a pinned table's column) go in one DMA: (host address, device address, length, the device
    // buffer's base, the host allocation).
    let mut direct: Option<(usize, sys::CUdeviceptr, usize, sys::CUdeviceptr, usize)> = None;
    // A copy straight from page-locked host memory (the pool's or registered).
    let copy_direct = |src: usize, dst: sys::CUdeviceptr, len: usize| {
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src as *const _, len, stream.cu_stream()) }
            .result()
            .gpu("host-to-device copy from page-locked memory")
    };
    for (index, piece) in pieces.iter().enumerate() {
        if piece.dst_offset + piece.src.len() > piece.dst.len() {
            return Err(gpu_error(format!(
                "upload of {} bytes at offset {} overruns a device buffer of {} bytes",
                piece.src.len(),
                piece.dst_offset,
                piece.dst.len()
            )));
        }
        if let Some(half) = piece.narrow
            && (piece.src.len() % 16 != 0
                || piece.dst_offset % 16 != 0
                || piece.dst_offset / 2 + piece.src.len() / 2 > half.len())
        {
            return Err(gpu_error(format!(
                "narrowed upload of {} bytes at offset {} does not fit 16-byte values into a buffer of {} bytes",
                piece.src.len(),
                piece.dst_offset,
                half.len()
            )));
        }
        let buffer = piece.dst.raw_ptr(stream);
        let base = buffer + piece.dst_offset as u64;
        if piece.src.is_empty() {
            continue;
        }
        let allocation = pool.allocation_of(piece.src);
        direct_from_pool |= allocation.is_some_and(|a| !a.held);
        if let Some(allocation) = allocation.map(|a| a.start) {
            let src = piece.src.as_ptr() as usize;
            let len = piece.src.len();
            direct = match direct {
                Some((s, d, n, b, a)) if a == allocation && b == buffer && s + n == src && d + n as u64 == base => {
                    Some((s, d, n + len, b, a))
                }
                Some((s, d, n, _, _)) => {
                    copy_direct(s, d, n)?;
                    Some((src, base, len, buffer, allocation))
                }
                None => Some((src, base, len, buffer, allocation)),
            };
            continue;
        }
        if registry.is_some_and(|r| r.prepare(piece.src)) {
            copy_direct(piece.src.as_ptr() as usize, base, piece.src.len())?;
            continue;
        }
        // Staged: as it is, or narrowed into the half-size buffer.
        let (shrink, target, target_buffer, flag) = match piece.narrow.filter(|_| NARROWING) {
            Some(half) => {
                landed[index] = Landed::Narrow;
                let half_base = half.raw_ptr(stream);
                (2, half_base + (piece.dst_offset / 2) as u64, half_base, Some(&fits[index]))
            }
            None => (1, base, buffer, None),
        };
        let staged_len = piece.src.len() / shrink;
        let mut off = 0usize;
        while off < staged_len {
            // A narrowed copy moves whole 8-byte values.
            if flag.is_some() && slot_bytes - fill < 8 {
                flush(stream, ring, slot, &batch, threads)?;
                batch.clear();
                fill = 0;
                slot ^= 1;
            }
            let mut n = (staged_len - off).min(slot_bytes - fill);
            if flag.is_some() {
                n -= n % 8;
            }
            batch.push(Staged {
                src: &piece.src[off * shrink..(off + n) * shrink],
                slot_offset: fill,
                dptr: target + off as u64,
                buffer: target_buffer,
                narrow: flag,
            });
            fill += n;
            off += n;
            if fill == slot_bytes {
                flush(stream, ring, slot, &batch, threads)?;
                batch.clear();
                fill = 0;
                slot ^= 1;
            }
        }
    }
    if let Some((s, d, n, _, _)) = direct {
        copy_direct(s, d, n)?;
    }
    if !batch.is_empty() {
        flush(stream, ring, slot, &batch, threads)?;
    }
    if direct_from_pool {
        stream.synchronize().gpu("waiting for copies from pinned host memory")?;
    }
    // Every host copy has run: the flags are final.
    for (l, f) in landed.iter_mut().zip(&fits) {
        if *l == Landed::Narrow && !f.load(Ordering::Relaxed) {
            *l = Landed::Overflow;
        }
    }
    Ok(landed)
}

fn flush(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    slot: usize,
    batch: &[Staged<'_>],
    threads: &rayon::ThreadPool,
) -> Result<()> {
    ring.wait(slot)?;
    let base = ring.slots[slot].as_mut_ptr();
    let copies: Vec<StageCopy<'_>> = batch
        .iter()
        .map(|c| StageCopy { src: c.src, dst: unsafe { base.add(c.slot_offset) }, narrow: c.narrow })
        .collect();
    // SAFETY: offsets were assigned without overlap inside the slot's capacity, each copy taking
    // its staged length.
    unsafe { parallel_stage(threads, &copies) };
    // Pieces that lie end to end both in the slot and in one device buffer (the parts of an
    // assembled buffer) go in one DMA: a copy call costs microseconds, as long as copying a small
    // piece. A copy must not span two allocations, even adjacent ones.
    // A run: (slot offset, device address, length, its buffer's base).
    let mut run: Option<(usize, sys::CUdeviceptr, usize, sys::CUdeviceptr)> = None;
    let dma = |(off, dptr, len, _): (usize, sys::CUdeviceptr, usize, sys::CUdeviceptr)| {
        unsafe { sys::cuMemcpyHtoDAsync_v2(dptr, base.add(off) as *const _, len, stream.cu_stream()) }
            .result()
            .gpu("host-to-device copy")
    };
    for c in batch {
        let len = c.staged_len();
        run = match run {
            Some((o, d, n, b)) if b == c.buffer && o + n == c.slot_offset && d + n as u64 == c.dptr => {
                Some((o, d, n + len, b))
            }
            Some(prev) => {
                dma(prev)?;
                Some((c.slot_offset, c.dptr, len, c.buffer))
            }
            None => Some((c.slot_offset, c.dptr, len, c.buffer)),
        };
    }
    if let Some(last) = run {
        dma(last)?;
    }
    ring.done[slot].record(stream).gpu("recording a staging event")?;
    ring.pending[slot] = true;
    Ok(())
}

/// Copies each device buffer into a new pinned block and returns them as Arrow buffers, after
/// `stream` has finished. Falls back to ordinary host memory through the staging ring when pinned
/// memory runs out.
pub fn download(
    stream: &Arc<CudaStream>,
    pool: &Arc<PinnedPool>,
    ring: &mut StagingRing,
    buffers: &[&DeviceBuffer],
    threads: &rayon::ThreadPool,
) -> Result<Vec<Buffer>> {
    stream.context().bind_to_thread().gpu("binding the CUDA context")?;
    let mut blocks: Vec<Option<PinnedBlock>> = Vec::with_capacity(buffers.len());
    for buf in buffers {
        if buf.is_empty() {
            blocks.push(None);
            continue;
        }
        match pool.alloc(buf.len()) {
            Ok(mut block) => {
                unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        block.as_mut_ptr() as *mut _,
                        buf.raw_ptr(stream),
                        buf.len(),
                        stream.cu_stream(),
                    )
                }
                .result()
                .gpu("device-to-host copy")?;
                blocks.push(Some(block));
            }
            Err(e) => {
                log::warn!("{e}; downloading through the staging buffers instead");
                blocks.push(None);
            }
        }
    }
    stream.synchronize().gpu("waiting for device-to-host copies")?;
    let mut out = Vec::with_capacity(buffers.len());
    for (buf, block) in buffers.iter().zip(blocks) {
        out.push(match block {
            Some(b) => b.into_buffer(buf.len())?,
            None if buf.is_empty() => Buffer::from(MutableBuffer::new(0)),
            None => download_staged(stream, ring, buf, threads)?,
        });
    }
    Ok(out)
}

/// Slot-by-slot download into ordinary host memory, for when pinned memory is exhausted.
fn download_staged(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    buf: &DeviceBuffer,
    threads: &rayon::ThreadPool,
) -> Result<Buffer> {
    ring.drain()?;
    let slot_bytes = ring.slot_bytes();
    let mut host = MutableBuffer::from_len_zeroed(buf.len());
    let src = buf.raw_ptr(stream);
    let mut off = 0usize;
    while off < buf.len() {
        let n = (buf.len() - off).min(slot_bytes);
        let slot = ring.slots[0].as_mut_ptr();
        unsafe { sys::cuMemcpyDtoHAsync_v2(slot as *mut _, src + off as u64, n, stream.cu_stream()) }
            .result()
            .gpu("device-to-host copy")?;
        stream.synchronize().gpu("waiting for a device-to-host copy")?;
        let staged = unsafe { std::slice::from_raw_parts(slot as *const u8, n) };
        let dst = host.as_mut_ptr();
        unsafe { parallel_copy(threads, &[(staged, dst.add(off))]) };
        off += n;
    }
    Ok(host.into())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testing::fresh_seed;

    /// Narrowed staging writes each 16-byte integer's low 8 bytes, over several copy tasks and a
    /// tail, and clears the flag if and only if some value does not fit in 8 bytes.
    #[test]
    fn narrowed_staging_keeps_low_halves_and_flags_values_past_64_bits() {
        let mut rng = StdRng::seed_from_u64(fresh_seed("narrowed_staging"));
        let n = COPY_TASK_BYTES / 16 * 3 + 5;
        let mut values: Vec<i128> = (0..n).map(|_| rng.random_range(-(1i128 << 63)..(1i128 << 63))).collect();
        values[..4].copy_from_slice(&[i64::MIN as i128, i64::MAX as i128, -1, 0]);
        for threads in [1, 4] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let stage = |values: &[i128]| {
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut out = vec![0u8; bytes.len() / 2];
                let fits = AtomicBool::new(true);
                let copy = StageCopy { src: &bytes, dst: out.as_mut_ptr(), narrow: Some(&fits) };
                unsafe { parallel_stage(&pool, &[copy]) };
                let low: Vec<i64> = out.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
                (fits.load(Ordering::Relaxed), low)
            };
            let (fits, low) = stage(&values);
            assert!(fits, "every value fits in 64 bits");
            assert_eq!(low, values.iter().map(|&v| v as i64).collect::<Vec<_>>());
            for bad in [i64::MAX as i128 + 1, i64::MIN as i128 - 1, 1i128 << 64, i128::MAX, i128::MIN] {
                let mut with_bad = values.clone();
                let at = rng.random_range(0..n);
                with_bad[at] = bad;
                let (fits, low) = stage(&with_bad);
                assert!(!fits, "{bad} at {at} of {n} ({threads} threads) does not fit");
                assert_eq!(low[at], bad as i64);
            }
        }
    }

    #[test]
    fn parallel_copy_copies_every_byte() {
        for threads in [1, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let a: Vec<u8> = (0..(5 << 20) + 17).map(|i| (i * 7 + 3) as u8).collect();
            let b: Vec<u8> = (0..1000).map(|i| (i * 13) as u8).collect();
            let mut out = vec![0u8; a.len() + b.len()];
            let base = out.as_mut_ptr();
            unsafe { parallel_copy(&pool, &[(&a, base), (&b, base.add(a.len()))]) };
            assert_eq!(&out[..a.len()], &a[..]);
            assert_eq!(&out[a.len()..], &b[..]);
        }
    }
}
