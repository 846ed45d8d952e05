//! `out[i] = in[idx[i]]` for 4-, 8- and 16-byte values.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, ptr};
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
        4 => kernel::GATHER_U32,
        8 => kernel::GATHER_U64,
        16 => kernel::GATHER_U128,
        w => return Err(gpu_error(format!("gather of {w}-byte values is not supported"))),
    };
    if (n * 4) as usize > idx.len() {
        return Err(gpu_error(format!("gather of {n} values with {} bytes of positions", idx.len())));
    }
    let out = gpu.alloc(stream, n as usize * width, "a gather's output")?;
    if n == 0 {
        return Ok(out);
    }
    if input.is_empty() {
        return Err(gpu_error("gather from an empty buffer"));
    }
    // gather_T(const T* in, const u32* idx, T* out, u64 n)
    gpu.launch_n(stream, kernel, n, &[ptr(input, stream), ptr(idx, stream), ptr(&out, stream), KArg::U64(n)])?;
    Ok(out)
}
