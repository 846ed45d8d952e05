//! Selection over byte flags: stable compaction of the positions whose flag has a wanted value,
//! row-id sequences, setting flags at row ids, composing position maps, and flags to bitmaps.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};

use super::scan::{ScanKind, exclusive_scan};
pub use crate::columns::bitmap_bytes;
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};

/// Positions per tile of the selection kernels (`SEL_TILE` in kernels/select.cu).
const TILE: u64 = 2048;
const THREADS: u32 = 256;

fn tile_grid(n: u64) -> Result<LaunchConfig> {
    super::tiles(n, TILE, THREADS)
}

/// The positions `i < n` with `flags[i] == want`, in increasing order, and how many there are.
pub fn select_where(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    flags: &DeviceBuffer,
    n: u64,
    want: u8,
) -> Result<(DeviceBuffer, usize)> {
    if n as usize > flags.len() {
        return Err(gpu_error(format!("selection over {n} flags in a buffer of {} bytes", flags.len())));
    }
    if n == 0 {
        return Ok((gpu.alloc(stream, 0, "a selection")?, 0));
    }
    if n > u32::MAX as u64 {
        return Err(gpu_error(format!("selection over {n} positions: at most 2^32 - 1")));
    }
    let tiles = n.div_ceil(TILE);
    let counts = gpu.alloc(stream, (tiles * 4) as usize, "a selection's tile counts")?;
    let want = KArg::U32(want as u32);
    // select_count(const u8* flags, u64 n, u32 want, u32* counts)
    gpu.launch(
        stream,
        kernel::SELECT_COUNT,
        tile_grid(n)?,
        &[ptr(flags, stream), KArg::U64(n), want, ptr(&counts, stream)],
    )?;
    let (offsets, total) = exclusive_scan(gpu, stream, &counts, tiles, ScanKind::U32, true)?;
    let total = total.ok_or_else(|| gpu_error("scan returned no total"))?;
    let count = gpu.read::<u32>(stream, &total, 0, 1)?[0] as usize;
    let out = gpu.alloc(stream, count * 4, "selected positions")?;
    if count > 0 {
        // select_write(const u8* flags, u64 n, u32 want, const u32* offsets, u32* out)
        gpu.launch(
            stream,
            kernel::SELECT_WRITE,
            tile_grid(n)?,
            &[ptr(flags, stream), KArg::U64(n), want, ptr(&offsets, stream), ptr(&out, stream)],
        )?;
    }
    Ok((out, count))
}

/// `[0, 1, ..., n - 1]` as u32.
pub fn iota(gpu: &Gpu, stream: &Arc<CudaStream>, n: u64) -> Result<DeviceBuffer> {
    let out = gpu.alloc(stream, n as usize * 4, "row ids")?;
    // iota_u32(u32* out, u64 n)
    gpu.launch_n(stream, kernel::IOTA_U32, n, &[ptr(&out, stream), KArg::U64(n)])?;
    Ok(out)
}

/// `flags[idx[i]] = 1` for the `n` row ids of `idx` (NULL_ROW skipped).
pub fn set_flags(gpu: &Gpu, stream: &Arc<CudaStream>, idx: &DeviceBuffer, n: u64, flags: &DeviceBuffer) -> Result<()> {
    // set_flags(const u32* idx, u64 n, u8* flags)
    gpu.launch_n(stream, kernel::SET_FLAGS, n, &[ptr(idx, stream), KArg::U64(n), ptr(flags, stream)])
}

/// An LSB-first bitmap whose bit i is `flags[idx[i]] != 0` (`flags[i]` without `idx`).
pub fn flags_to_bitmap(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    flags: &DeviceBuffer,
    idx: Option<&DeviceBuffer>,
    n: u64,
) -> Result<DeviceBuffer> {
    let out = gpu.alloc(stream, bitmap_bytes(n), "a bitmap")?;
    // flags_to_bitmap(const u8* flags, const u32* idx, u64 n, u32* bitmap)
    gpu.launch_n(
        stream,
        kernel::FLAGS_TO_BITMAP,
        n.div_ceil(32) * 32,
        &[ptr(flags, stream), opt_ptr(idx, stream), KArg::U64(n), ptr(&out, stream)],
    )?;
    Ok(out)
}

/// `map[idx[i]]` for each of the `n` positions of `idx` (NULL_ROW kept): positions in a
/// transformed order to row ids.
pub fn compose(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    map: &DeviceBuffer,
    idx: &DeviceBuffer,
    n: u64,
) -> Result<DeviceBuffer> {
    let out = gpu.alloc(stream, n as usize * 4, "row ids")?;
    // compose_rows(const u32* map, const u32* idx, u64 n, u32* out)
    gpu.launch_n(
        stream,
        kernel::COMPOSE_ROWS,
        n,
        &[ptr(map, stream), ptr(idx, stream), KArg::U64(n), ptr(&out, stream)],
    )?;
    Ok(out)
}

/// `(a[sel[i]], b[sel[i]])` for the `n` positions of `sel`: compacting pairs.
pub fn gather_pairs(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    a: &DeviceBuffer,
    b: &DeviceBuffer,
    sel: &DeviceBuffer,
    n: u64,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let a_out = gpu.alloc(stream, n as usize * 4, "join pairs")?;
    let b_out = gpu.alloc(stream, n as usize * 4, "join pairs")?;
    // gather_pairs(const u32* a, const u32* b, const u32* sel, u64 n, u32* a_out, u32* b_out)
    gpu.launch_n(
        stream,
        kernel::GATHER_PAIRS,
        n,
        &[ptr(a, stream), ptr(b, stream), ptr(sel, stream), KArg::U64(n), ptr(&a_out, stream), ptr(&b_out, stream)],
    )?;
    Ok((a_out, b_out))
}
