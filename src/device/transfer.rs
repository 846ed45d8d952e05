//! Host <-> device copies, always through pinned memory.
//!
//! Upload: host bytes are copied by several threads into one of two pinned staging slots while
//! the DMA engine drains the other (double buffering); small pieces share a slot. Download: the
//! device writes straight into pooled pinned blocks that become the Arrow buffers.

use std::sync::Arc;

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
    let total: usize = pieces.iter().map(|(s, _)| s.len()).sum();
    if total <= COPY_TASK_BYTES || pool.current_num_threads() <= 1 {
        for (src, dst) in pieces {
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), *dst, src.len()) };
        }
        return;
    }
    // Destinations travel as addresses: raw pointers are not Send.
    let tasks: Vec<(&[u8], usize)> = pieces
        .iter()
        .flat_map(|(src, dst)| {
            src.chunks(COPY_TASK_BYTES).enumerate().map(move |(i, c)| (c, *dst as usize + i * COPY_TASK_BYTES))
        })
        .collect();
    use rayon::prelude::*;
    pool.install(|| {
        tasks
            .par_iter()
            .for_each(|(src, dst)| unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), *dst as *mut u8, src.len()) })
    });
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
}

/// Copies every piece to the device on `stream`: straight from host memory for buffers in
/// `pool`'s pinned memory or that the `registry` (when given) has page-locked, through `ring` otherwise,
/// `threads` filling the staging slots. Returns when the host bytes are no longer needed (they
/// are all in pinned memory that stays allocated, or already on the device); the device copies
/// may still be in flight on `stream`.
pub fn upload(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    registry: Option<&HostRegistry>,
    pool: &PinnedPool,
    pieces: &[UploadPiece<'_>],
    threads: &rayon::ThreadPool,
) -> Result<()> {
    let slot_bytes = ring.slot_bytes();
    let ctx = stream.context();
    ctx.bind_to_thread().gpu("binding the CUDA context")?;
    // (host source, slot offset, device address, its buffer's base) of the copies gathered in
    // the current slot.
    let mut batch: Vec<(&[u8], usize, sys::CUdeviceptr, sys::CUdeviceptr)> = Vec::new();
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
    for piece in pieces {
        if piece.dst_offset + piece.src.len() > piece.dst.len() {
            return Err(gpu_error(format!(
                "upload of {} bytes at offset {} overruns a device buffer of {} bytes",
                piece.src.len(),
                piece.dst_offset,
                piece.dst.len()
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
        let mut off = 0usize;
        while off < piece.src.len() {
            let n = (piece.src.len() - off).min(slot_bytes - fill);
            batch.push((&piece.src[off..off + n], fill, base + off as u64, buffer));
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
    Ok(())
}

fn flush(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    slot: usize,
    batch: &[(&[u8], usize, sys::CUdeviceptr, sys::CUdeviceptr)],
    threads: &rayon::ThreadPool,
) -> Result<()> {
    ring.wait(slot)?;
    let base = ring.slots[slot].as_mut_ptr();
    let copies: Vec<(&[u8], *mut u8)> =
        batch.iter().map(|(src, off, _, _)| (*src, unsafe { base.add(*off) })).collect();
    // SAFETY: offsets were assigned without overlap inside the slot's capacity.
    unsafe { parallel_copy(threads, &copies) };
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
    for &(src, off, dptr, buffer) in batch {
        run = match run {
            Some((o, d, n, b)) if b == buffer && o + n == off && d + n as u64 == dptr => Some((o, d, n + src.len(), b)),
            Some(prev) => {
                dma(prev)?;
                Some((off, dptr, src.len(), buffer))
            }
            None => Some((off, dptr, src.len(), buffer)),
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
    use super::parallel_copy;

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
