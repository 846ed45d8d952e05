//! `out[i] = in[idx[i]]` for 4-, 8- and 16-byte values.

use std::sync::Arc;

use cudarc::driver::{CudaStream, PushKernelArg};

use crate::device::{DeviceBuffer, Gpu, check_launch, grid_for};
use crate::error::{Result, gpu_error};

/// Gathers `n` values of `width` bytes (4, 8 or 16) from `input` at the u32 positions `idx`.
/// Positions must be below the number of values in `input`.
pub fn gather(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    input: &DeviceBuffer,
    idx: &DeviceBuffer,
    n: u64,
    width: usize,
) -> Result<DeviceBuffer> {
    let kernel = match width {
        4 => "gather_u32",
        8 => "gather_u64",
        16 => "gather_u128",
        w => return Err(gpu_error(format!("gather of {w}-byte values is not supported"))),
    };
    if (n * 4) as usize > idx.len() {
        return Err(gpu_error(format!("gather of {n} values with {} bytes of positions", idx.len())));
    }
    let mut out = gpu.alloc(stream, n as usize * width, "a gather's output")?;
    if n == 0 {
        return Ok(out);
    }
    let (Some(i), Some(x), Some(o)) = (input.slice(stream), idx.slice(stream), out.slice_mut(stream)) else {
        return Err(gpu_error("gather from an empty buffer"));
    };
    let f = gpu.kernels().function("gather", kernel)?;
    let mut b = stream.launch_builder(&f);
    b.arg(i).arg(x).arg(o).arg(&n);
    // SAFETY: gather_T(const T*, const u32*, T*, u64) with n positions and n outputs.
    check_launch(stream, unsafe { b.launch(grid_for(n, 256, gpu.info().sm_count)) }, kernel)?;
    Ok(out)
}
