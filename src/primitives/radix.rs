//! Stable LSD radix sort of (key, value) pairs over a bit range, 8 bits per pass: histogram per
//! tile, exclusive scan of the digit-major histogram, stable scatter. Sorting on the bits
//! `[begin, end)` of hashed keys is the radix partitioning of the partitioned joins and
//! group-by; sorting on all bits is the sort of the sort-merge join and sort group-by.

use std::sync::Arc;

use cudarc::driver::{CudaStream, PushKernelArg};

use super::scan::exclusive_scan_u32;
use super::tiles;
use crate::device::{DeviceBuffer, Gpu, check_launch};
use crate::error::{Result, gpu_error};

/// Threads per block of the radix kernels; a tile is THREADS x items_per_thread items.
const THREADS: u32 = 256;
/// Bits per pass.
pub const DIGIT_BITS: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyWidth {
    U32,
    U64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueWidth {
    U32,
    U64,
}

impl KeyWidth {
    pub fn bytes(self) -> usize {
        match self {
            KeyWidth::U32 => 4,
            KeyWidth::U64 => 8,
        }
    }
    pub fn bits(self) -> u32 {
        self.bytes() as u32 * 8
    }
    fn tag(self) -> &'static str {
        match self {
            KeyWidth::U32 => "k32",
            KeyWidth::U64 => "k64",
        }
    }
}

/// Items per thread of a pass over these widths (the kernels' ITEMS): 16 for 32-bit keys with
/// 32-bit values, 8 otherwise, to keep a tile within 48 KB of shared memory.
fn items_per_thread(key: KeyWidth, value: ValueWidth) -> u64 {
    if key == KeyWidth::U32 && value == ValueWidth::U32 { 16 } else { 8 }
}

impl ValueWidth {
    pub fn bytes(self) -> usize {
        match self {
            ValueWidth::U32 => 4,
            ValueWidth::U64 => 8,
        }
    }
    fn tag(self) -> &'static str {
        match self {
            ValueWidth::U32 => "v32",
            ValueWidth::U64 => "v64",
        }
    }
}

/// Sorts `n` pairs stably by the key bits `[begin_bit, end_bit)` (unsigned order). Consumes the
/// inputs and returns the sorted keys and values (new or reused buffers).
#[allow(clippy::too_many_arguments)]
pub fn radix_sort_pairs(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: DeviceBuffer,
    values: DeviceBuffer,
    n: u64,
    key: KeyWidth,
    value: ValueWidth,
    begin_bit: u32,
    end_bit: u32,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    if begin_bit > end_bit || end_bit > key.bits() {
        return Err(gpu_error(format!("radix sort on bits {begin_bit}..{end_bit} of a {}-bit key", key.bits())));
    }
    if n > u32::MAX as u64 {
        return Err(gpu_error(format!("radix sort of {n} rows: at most 2^32 - 1 per call")));
    }
    if (n as usize) * key.bytes() > keys.len() || (n as usize) * value.bytes() > values.len() {
        return Err(gpu_error("radix sort inputs are shorter than n"));
    }
    if n == 0 || begin_bit == end_bit {
        return Ok((keys, values));
    }
    let items = items_per_thread(key, value);
    let tile = THREADS as u64 * items;
    let blocks = n.div_ceil(tile);
    let hist_fn = gpu.kernels().function("radix", &format!("radix_histogram_{}_i{items}", key.tag()))?;
    let scatter_name = format!("radix_scatter_{}_{}", key.tag(), value.tag());
    let scatter_fn = gpu.kernels().function("radix", &scatter_name)?;
    let (mut k_in, mut v_in) = (keys, values);
    let mut k_out = gpu.alloc(stream, n as usize * key.bytes(), "radix sort keys")?;
    let mut v_out = gpu.alloc(stream, n as usize * value.bytes(), "radix sort values")?;
    let mut shift = begin_bit;
    while shift < end_bit {
        let bits = DIGIT_BITS.min(end_bit - shift);
        let mask: u32 = (1u32 << bits) - 1;
        let bins = mask as u64 + 1;
        let mut hist = gpu.alloc(stream, (bins * blocks * 4) as usize, "radix histograms")?;
        {
            let (Some(k), Some(h)) = (k_in.slice(), hist.slice_mut()) else {
                return Err(gpu_error("empty radix buffers"));
            };
            let mut b = stream.launch_builder(&hist_fn);
            b.arg(k).arg(&n).arg(&shift).arg(&mask).arg(h);
            // SAFETY: radix_histogram_kXX(const K*, u64, u32, u32, u32* hist[bins * tiles]).
            check_launch(stream, unsafe { b.launch(tiles(n, tile, THREADS)?) }, "radix_histogram")?;
        }
        let offsets = exclusive_scan_u32(gpu, stream, &hist, bins * blocks)?;
        {
            let (Some(ki), Some(vi), Some(off)) = (k_in.slice(), v_in.slice(), offsets.slice()) else {
                return Err(gpu_error("empty radix buffers"));
            };
            let (Some(ko), Some(vo)) = (k_out.slice_mut(), v_out.slice_mut()) else {
                return Err(gpu_error("empty radix buffers"));
            };
            let mut b = stream.launch_builder(&scatter_fn);
            b.arg(ki).arg(vi).arg(ko).arg(vo).arg(&n).arg(&shift).arg(&mask).arg(off);
            // SAFETY: radix_scatter_kXX_vXX(keys_in, vals_in, keys_out, vals_out, u64, u32, u32,
            // const u32* offsets[bins * tiles]); outputs hold n entries.
            check_launch(stream, unsafe { b.launch(tiles(n, tile, THREADS)?) }, &scatter_name)?;
        }
        std::mem::swap(&mut k_in, &mut k_out);
        std::mem::swap(&mut v_in, &mut v_out);
        shift += bits;
    }
    Ok((k_in, v_in))
}

/// Moves `values` through the same stable passes that [`radix_sort_pairs`] applies to `keys`
/// over `[begin_bit, end_bit)`: the values come out in the order the keys' sort gives them (the
/// "transform" of a payload column in the GFTR materialisation of seed 002). `keys` is left as it
/// was.
#[allow(clippy::too_many_arguments)]
pub fn radix_permute_values(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &DeviceBuffer,
    values: DeviceBuffer,
    n: u64,
    key: KeyWidth,
    value: ValueWidth,
    begin_bit: u32,
    end_bit: u32,
) -> Result<DeviceBuffer> {
    let bytes = n as usize * key.bytes();
    let mut scratch = gpu.alloc(stream, bytes, "radix transform keys")?;
    if bytes > 0 {
        gpu.copy_device(stream, keys, &mut scratch, bytes)?;
    }
    let (_, v) = radix_sort_pairs(gpu, stream, scratch, values, n, key, value, begin_bit, end_bit)?;
    Ok(v)
}
