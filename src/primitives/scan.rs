//! Exclusive prefix sums: u32 -> u32, u64 -> u64, and u32 -> u64 (counts whose total may pass
//! 2^32, such as the output sizes of a join).

use std::sync::Arc;

use cudarc::driver::{CudaStream, PushKernelArg};

use super::tiles;
use crate::device::{DeviceBuffer, Gpu, check_launch};
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
    fn suffix(self) -> &'static str {
        match self {
            ScanKind::U32 => "u32",
            ScanKind::U64 => "u64",
            ScanKind::U32ToU64 => "u32_to_u64",
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
    let mut out = gpu.alloc(stream, (n * kind.out_bytes()) as usize, "a prefix sum")?;
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
        let mut partials = gpu.alloc(stream, (blocks * kind.out_bytes()) as usize, "a prefix sum's tile totals")?;
        let name = format!("scan_reduce_{}", kind.suffix());
        let f = gpu.kernels().function("scan", &name)?;
        let (Some(i), Some(p)) = (input.slice(stream), partials.slice_mut(stream)) else {
            return Err(gpu_error("empty scan buffers"));
        };
        let mut b = stream.launch_builder(&f);
        b.arg(i).arg(p).arg(&n);
        // SAFETY: scan_reduce_X(const I*, O*, u64): one partial per tile.
        check_launch(stream, unsafe { b.launch(tiles(n, TILE, THREADS)?) }, &name)?;
        exclusive_scan(gpu, stream, &partials, blocks, kind.partials(), false)?.0
    };
    let name = format!("scan_tiles_{}", kind.suffix());
    let f = gpu.kernels().function("scan", &name)?;
    let (Some(i), Some(o), Some(off)) = (input.slice(stream), out.slice_mut(stream), offsets.slice(stream)) else {
        return Err(gpu_error("empty scan buffers"));
    };
    let total_ptr = total.as_ref().map_or(0, |t| t.raw_ptr(stream));
    let mut b = stream.launch_builder(&f);
    b.arg(i).arg(o).arg(off).arg(&n).arg(&total_ptr);
    // SAFETY: scan_tiles_X(const I*, O*, const O* offsets, u64, O* total or null): offsets has
    // one value per tile; total, when set, holds one value.
    check_launch(stream, unsafe { b.launch(tiles(n, TILE, THREADS)?) }, &name)?;
    drop(offsets);
    Ok((out, total))
}
