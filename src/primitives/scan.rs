//! Exclusive prefix sums of u32 values.

use std::sync::Arc;

use cudarc::driver::{CudaStream, PushKernelArg};

use super::tiles;
use crate::device::{DeviceBuffer, Gpu, check_launch};
use crate::error::{Result, gpu_error};

/// Items per tile of the scan kernels (`SCAN_THREADS * SCAN_ITEMS` in kernels/scan.cu).
const TILE: u64 = 2048;
const THREADS: u32 = 256;

/// `out[i] = in[0] + ... + in[i - 1]` over the first `n` u32 values of `input` (sums wrap at 2^32:
/// callers keep totals below it).
pub fn exclusive_scan_u32(gpu: &Gpu, stream: &Arc<CudaStream>, input: &DeviceBuffer, n: u64) -> Result<DeviceBuffer> {
    if (n * 4) as usize > input.len() {
        return Err(gpu_error(format!("scan of {n} values over a buffer of {} bytes", input.len())));
    }
    let mut out = gpu.alloc(stream, (n * 4) as usize, "a prefix sum")?;
    if n == 0 {
        return Ok(out);
    }
    let blocks = n.div_ceil(TILE);
    // Offsets of the tiles: zero for a single tile, else the scanned tile totals.
    let offsets = if blocks == 1 {
        let mut z = gpu.alloc(stream, 4, "a prefix sum")?;
        if let Some(s) = z.slice_mut() {
            stream.memset_zeros(s).map_err(|e| gpu_error(format!("clearing a buffer: {e}")))?;
        }
        z
    } else {
        let mut partials = gpu.alloc(stream, (blocks * 4) as usize, "a prefix sum's tile totals")?;
        let f = gpu.kernels().function("scan", "scan_reduce_u32")?;
        let (Some(i), Some(p)) = (input.slice(), partials.slice_mut()) else {
            return Err(gpu_error("empty scan buffers"));
        };
        let mut b = stream.launch_builder(&f);
        b.arg(i).arg(p).arg(&n);
        // SAFETY: scan_reduce_u32(const u32*, u32*, u64): one partial per tile.
        check_launch(stream, unsafe { b.launch(tiles(n, TILE, THREADS)?) }, "scan_reduce_u32")?;
        exclusive_scan_u32(gpu, stream, &partials, blocks)?
    };
    let f = gpu.kernels().function("scan", "scan_tiles_u32")?;
    let (Some(i), Some(o), Some(off)) = (input.slice(), out.slice_mut(), offsets.slice()) else {
        return Err(gpu_error("empty scan buffers"));
    };
    let mut b = stream.launch_builder(&f);
    b.arg(i).arg(o).arg(off).arg(&n);
    // SAFETY: scan_tiles_u32(const u32*, u32*, const u32* offsets, u64): offsets has one per tile.
    check_launch(stream, unsafe { b.launch(tiles(n, TILE, THREADS)?) }, "scan_tiles_u32")?;
    drop(offsets);
    Ok(out)
}
