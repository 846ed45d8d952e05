//! Exclusive prefix sums: u32 -> u32, u64 -> u64, and u32 -> u64 (counts whose total may pass
//! 2^32, such as the output sizes of a join).

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::tiles;
use crate::device::kernel::{self, Kernel};
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};

/// Items per tile of the scan kernels (`SCAN_THREADS * SCAN_ITEMS` in kernels/scan.cu).
const TILE: u64 = 2048;
const THREADS: u32 = 256;

/// Input and output widths of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanKind {
    U32,
    U64,
    U32ToU64,
}

impl ScanKind {
    /// The kernels of the two passes: tile totals, then each tile's scan.
    fn kernels(self) -> (Kernel, Kernel) {
        match self {
            ScanKind::U32 => (kernel::SCAN_REDUCE_U32, kernel::SCAN_TILES_U32),
            ScanKind::U64 => (kernel::SCAN_REDUCE_U64, kernel::SCAN_TILES_U64),
            ScanKind::U32ToU64 => (kernel::SCAN_REDUCE_U32_TO_U64, kernel::SCAN_TILES_U32_TO_U64),
        }
    }
    fn in_bytes(self) -> u64 {
        match self {
            ScanKind::U32 | ScanKind::U32ToU64 => 4,
            ScanKind::U64 => 8,
        }
    }
    fn out_bytes(self) -> u64 {
        match self {
            ScanKind::U32 => 4,
            ScanKind::U64 | ScanKind::U32ToU64 => 8,
        }
    }
    /// The kind that scans this kind's tile totals.
    fn partials(self) -> ScanKind {
        match self {
            ScanKind::U32 => ScanKind::U32,
            ScanKind::U64 | ScanKind::U32ToU64 => ScanKind::U64,
        }
    }
}

/// `out[i] = in[0] + ... + in[i - 1]` over the first `n` u32 values of `input` (sums wrap at 2^32:
/// callers keep totals below it).
pub fn exclusive_scan_u32(gpu: &Gpu, stream: &Arc<CudaStream>, input: &DeviceBuffer, n: u64) -> Result<DeviceBuffer> {
    Ok(exclusive_scan(gpu, stream, input, n, ScanKind::U32, false)?.0)
}

/// Exclusive scan of `n` values of `input`; with `with_total`, also a one-value buffer holding the
/// sum of all `n` values (0 when `n` is 0).
pub fn exclusive_scan(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    input: &DeviceBuffer,
    n: u64,
    kind: ScanKind,
    with_total: bool,
) -> Result<(DeviceBuffer, Option<DeviceBuffer>)> {
    if (n * kind.in_bytes()) as usize > input.len() {
        return Err(gpu_error(format!("scan of {n} values over a buffer of {} bytes", input.len())));
    }
    let out = gpu.alloc(stream, (n * kind.out_bytes()) as usize, "a prefix sum")?;
    let mut total =
        if with_total { Some(gpu.alloc(stream, kind.out_bytes() as usize, "a prefix sum's total")?) } else { None };
    if n == 0 {
        if let Some(t) = total.as_mut().and_then(|t| t.slice_mut(stream)) {
            stream.memset_zeros(t).map_err(|e| gpu_error(format!("clearing a buffer: {e}")))?;
        }
        return Ok((out, total));
    }
    let blocks = n.div_ceil(TILE);
    // Offsets of the tiles: zero for a single tile, else the scanned tile totals.
    let offsets = if blocks == 1 {
        let mut z = gpu.alloc(stream, kind.out_bytes() as usize, "a prefix sum")?;
        if let Some(s) = z.slice_mut(stream) {
            stream.memset_zeros(s).map_err(|e| gpu_error(format!("clearing a buffer: {e}")))?;
        }
        z
    } else {
        let partials = gpu.alloc(stream, (blocks * kind.out_bytes()) as usize, "a prefix sum's tile totals")?;
        // scan_reduce_X(const I* in, O* partials, u64 n): one partial per tile.
        let args = [ptr(input, stream), ptr(&partials, stream), KArg::U64(n)];
        gpu.launch(stream, kind.kernels().0, tiles(n, TILE, THREADS)?, &args)?;
        exclusive_scan(gpu, stream, &partials, blocks, kind.partials(), false)?.0
    };
    // scan_tiles_X(const I* in, O* out, const O* offsets, u64 n, O* total or null): offsets has
    // one value per tile; total, when set, holds one value.
    let args =
        [ptr(input, stream), ptr(&out, stream), ptr(&offsets, stream), KArg::U64(n), opt_ptr(total.as_ref(), stream)];
    gpu.launch(stream, kind.kernels().1, tiles(n, TILE, THREADS)?, &args)?;
    drop(offsets);
    Ok((out, total))
}
