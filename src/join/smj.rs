//! SMJ: the sort-merge join. Both sides are radix-sorted on their key words (all bits); each
//! sorted probe item's matches are the run of equal build keys, bounded per warp and then found
//! by binary search inside the warp's range (kernels/join.cu, `smj_bounds`). Equal keys are
//! equal words, so sorting the mixed words is as good as sorting the keys for an equi-join.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::transform::Transformed;
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, ptr};
use crate::error::Result;
use crate::primitives::radix::KeyWidth;

/// Per sorted probe item, the start of its run of equal sorted build keys and the run's length.
pub fn bounds(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    build: &Transformed,
    probe: &Transformed,
    width: KeyWidth,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let n = probe.items;
    let start = gpu.alloc(stream, n as usize * 4, "join match runs")?;
    let count = gpu.alloc(stream, n as usize * 4, "join match counts")?;
    // smj_bounds_kX(build, nb, probe, np, start, count): a warp per 32 probe items
    gpu.launch_n(
        stream,
        width.kernel(kernel::SMJ_BOUNDS),
        n.div_ceil(32) * 32,
        &[
            ptr(&build.keys, stream),
            KArg::U64(build.items),
            ptr(&probe.keys, stream),
            KArg::U64(n),
            ptr(&start, stream),
            ptr(&count, stream),
        ],
    )?;
    Ok((start, count))
}
