//! Stable LSD radix sort of (key, value) pairs over a bit range, 8 bits per pass: histogram per
//! tile, exclusive scan of the digit-major histogram, stable scatter. Sorting on the bits
//! `[begin, end)` of hashed keys is the radix partitioning of the partitioned joins and
//! group-by; sorting on all bits is the sort of the sort-merge join and sort group-by.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::scan::exclusive_scan_u32;
use super::tiles;
use crate::device::kernel::{self, Kernel, PerKeyWord};
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
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
    /// The kernel of `family` compiled for this key width.
    pub fn kernel(self, family: PerKeyWord) -> Kernel {
        match self {
            KeyWidth::U32 => family.k32,
            KeyWidth::U64 => family.k64,
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
    let (histogram, scatter) = match (key, value) {
        (KeyWidth::U32, ValueWidth::U32) => (kernel::RADIX_HISTOGRAM_K32_I16, kernel::RADIX_SCATTER_K32_V32),
        (KeyWidth::U32, ValueWidth::U64) => (kernel::RADIX_HISTOGRAM_K32_I8, kernel::RADIX_SCATTER_K32_V64),
        (KeyWidth::U64, ValueWidth::U32) => (kernel::RADIX_HISTOGRAM_K64_I8, kernel::RADIX_SCATTER_K64_V32),
        (KeyWidth::U64, ValueWidth::U64) => (kernel::RADIX_HISTOGRAM_K64_I8, kernel::RADIX_SCATTER_K64_V64),
    };
    let (mut k_in, mut v_in) = (keys, values);
    let mut k_out = gpu.alloc(stream, n as usize * key.bytes(), "radix sort keys")?;
    let mut v_out = gpu.alloc(stream, n as usize * value.bytes(), "radix sort values")?;
    let mut shift = begin_bit;
    while shift < end_bit {
        let bits = DIGIT_BITS.min(end_bit - shift);
        let mask: u32 = (1u32 << bits) - 1;
        let bins = mask as u64 + 1;
        let hist = gpu.alloc(stream, (bins * blocks * 4) as usize, "radix histograms")?;
        // radix_histogram_kX_iN(const K* keys, u64 n, u32 shift, u32 mask, u32* hist[bins * tiles])
        gpu.launch(
            stream,
            histogram,
            tiles(n, tile, THREADS)?,
            &[ptr(&k_in, stream), KArg::U64(n), KArg::U32(shift), KArg::U32(mask), ptr(&hist, stream)],
        )?;
        let offsets = exclusive_scan_u32(gpu, stream, &hist, bins * blocks)?;
        // radix_scatter_kX_vY(keys_in, vals_in, keys_out, vals_out, u64 n, u32 shift, u32 mask,
        // const u32* offsets[bins * tiles]); the outputs hold n entries.
        gpu.launch(
            stream,
            scatter,
            tiles(n, tile, THREADS)?,
            &[
                ptr(&k_in, stream),
                ptr(&v_in, stream),
                ptr(&k_out, stream),
                ptr(&v_out, stream),
                KArg::U64(n),
                KArg::U32(shift),
                KArg::U32(mask),
                ptr(&offsets, stream),
            ],
        )?;
        std::mem::swap(&mut k_in, &mut k_out);
        std::mem::swap(&mut v_in, &mut v_out);
        shift += bits;
    }
    Ok((k_in, v_in))
}

/// A value array moved by [`radix_sort_multi`].
#[derive(Debug, Clone, Copy)]
pub enum SortValues<'a> {
    /// An array of `n` values of this width, read (not consumed) by the first pass.
    Array(&'a DeviceBuffer, ValueWidth),
    /// The row ids `0..n` (4 bytes): generated by the first pass's kernel, never stored before.
    RowIds,
}

impl SortValues<'_> {
    fn width(&self) -> ValueWidth {
        match self {
            SortValues::Array(_, w) => *w,
            SortValues::RowIds => ValueWidth::U32,
        }
    }
}

/// Items per thread of `radix_scatter_multi` (a tile is 256 x this many items).
pub const MULTI_ITEMS: u64 = 16;

/// Sorts `n` keys stably by the bits `[begin_bit, end_bit)` and moves every array of `values`
/// through the same permutation, ranking each tile once per pass (kernels/radix.cu,
/// `radix_scatter_multi`). The inputs are only read: the first pass reads them where they are
/// (no copies), and row ids come from the kernel. Returns the sorted keys and the values in the
/// order given, in new buffers.
#[allow(clippy::too_many_arguments)]
pub fn radix_sort_multi(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &DeviceBuffer,
    values: &[SortValues<'_>],
    n: u64,
    key: KeyWidth,
    begin_bit: u32,
    end_bit: u32,
) -> Result<(DeviceBuffer, Vec<DeviceBuffer>)> {
    radix_sort_multi_tiles(gpu, stream, keys, values, n, key, begin_bit, end_bit, MULTI_ITEMS)
}

/// [`radix_sort_multi`] with tiles of `items` (8 or 16) items per thread; `bench primitives`
/// compares the two.
#[allow(clippy::too_many_arguments)]
pub fn radix_sort_multi_tiles(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &DeviceBuffer,
    values: &[SortValues<'_>],
    n: u64,
    key: KeyWidth,
    begin_bit: u32,
    end_bit: u32,
    items: u64,
) -> Result<(DeviceBuffer, Vec<DeviceBuffer>)> {
    if begin_bit > end_bit || end_bit > key.bits() {
        return Err(gpu_error(format!("radix sort on bits {begin_bit}..{end_bit} of a {}-bit key", key.bits())));
    }
    if n > u32::MAX as u64 {
        return Err(gpu_error(format!("radix sort of {n} rows: at most 2^32 - 1 per call")));
    }
    if values.len() > 32 {
        return Err(gpu_error(format!("a radix sort carrying {} value arrays: at most 32", values.len())));
    }
    if items != 8 && items != 16 {
        return Err(gpu_error(format!("radix tiles of {items} items per thread: 8 or 16 are compiled")));
    }
    let short = |b: &DeviceBuffer, w: usize| (n as usize) * w > b.len();
    if short(keys, key.bytes()) || values.iter().any(|v| matches!(v, SortValues::Array(b, w) if short(b, w.bytes()))) {
        return Err(gpu_error("radix sort inputs are shorter than n"));
    }
    let widths: Vec<ValueWidth> = values.iter().map(SortValues::width).collect();
    if n == 0 || begin_bit == end_bit {
        // Nothing to reorder: the outputs are copies of the inputs.
        let k = gpu.clone_buffer(stream, keys, "radix sort keys")?;
        let v = values
            .iter()
            .map(|v| match v {
                SortValues::Array(b, _) => gpu.clone_buffer(stream, b, "radix sort values"),
                SortValues::RowIds => super::select::iota(gpu, stream, n),
            })
            .collect::<Result<Vec<_>>>()?;
        return Ok((k, v));
    }
    let wide = widths.iter().enumerate().fold(0u32, |m, (j, w)| if *w == ValueWidth::U64 { m | (1 << j) } else { m });
    let tile = THREADS as u64 * items;
    let blocks = n.div_ceil(tile);
    let (hist, scatter) = match (key, items) {
        (KeyWidth::U32, 16) => (kernel::RADIX_HISTOGRAM_K32_I16, kernel::RADIX_SCATTER_MULTI_K32_I16),
        (KeyWidth::U32, _) => (kernel::RADIX_HISTOGRAM_K32_I8, kernel::RADIX_SCATTER_MULTI_K32_I8),
        (KeyWidth::U64, 16) => (kernel::RADIX_HISTOGRAM_K64_I16, kernel::RADIX_SCATTER_MULTI_K64_I16),
        (KeyWidth::U64, _) => (kernel::RADIX_HISTOGRAM_K64_I8, kernel::RADIX_SCATTER_MULTI_K64_I8),
    };
    // The previous pass's outputs (None before the first pass, which reads the inputs).
    let mut moved: Option<(DeviceBuffer, Vec<DeviceBuffer>)> = None;
    let mut shift = begin_bit;
    while shift < end_bit {
        let bits = DIGIT_BITS.min(end_bit - shift);
        let mask: u32 = (1u32 << bits) - 1;
        let bins = mask as u64 + 1;
        let (k_in, vin_addr): (&DeviceBuffer, Vec<u64>) = match &moved {
            Some((k, v)) => (k, v.iter().map(|b| b.raw_ptr(stream)).collect()),
            None => (
                keys,
                values
                    .iter()
                    .map(|v| match v {
                        SortValues::Array(b, _) => b.raw_ptr(stream),
                        SortValues::RowIds => 0, // the kernel writes the input index
                    })
                    .collect(),
            ),
        };
        let counts = gpu.alloc(stream, (bins * blocks * 4) as usize, "radix histograms")?;
        // radix_histogram_kX_iN(const K* keys, u64 n, u32 shift, u32 mask, u32* hist)
        gpu.launch(
            stream,
            hist,
            tiles(n, tile, THREADS)?,
            &[ptr(k_in, stream), KArg::U64(n), KArg::U32(shift), KArg::U32(mask), ptr(&counts, stream)],
        )?;
        let offsets = exclusive_scan_u32(gpu, stream, &counts, bins * blocks)?;
        drop(counts);
        let k_out = gpu.alloc(stream, n as usize * key.bytes(), "radix sort keys")?;
        let v_out = widths
            .iter()
            .map(|w| gpu.alloc(stream, n as usize * w.bytes(), "radix sort values"))
            .collect::<Result<Vec<_>>>()?;
        let vout_addr: Vec<u64> = v_out.iter().map(|b| b.raw_ptr(stream)).collect();
        // No value arrays (a side whose rows and columns the join does not read): null lists.
        let addresses = |a: &[u64]| -> Result<Option<DeviceBuffer>> {
            if a.is_empty() { Ok(None) } else { super::upload_slice(gpu, stream, a, "radix value addresses").map(Some) }
        };
        let (vin, vout) = (addresses(&vin_addr)?, addresses(&vout_addr)?);
        // radix_scatter_multi_kX_iN(keys_in, keys_out, n, shift, mask, offsets, vals_in, vals_out, nv, wide)
        gpu.launch(
            stream,
            scatter,
            tiles(n, tile, THREADS)?,
            &[
                ptr(k_in, stream),
                ptr(&k_out, stream),
                KArg::U64(n),
                KArg::U32(shift),
                KArg::U32(mask),
                ptr(&offsets, stream),
                opt_ptr(vin.as_ref(), stream),
                opt_ptr(vout.as_ref(), stream),
                KArg::U32(widths.len() as u32),
                KArg::U32(wide),
            ],
        )?;
        moved = Some((k_out, v_out));
        shift += bits;
    }
    moved.ok_or_else(|| gpu_error("a radix sort without a pass"))
}

/// The `2^bits + 1` partition offsets of `n` key words radix-partitioned on their low `bits`
/// bits, on the device (the partitioned hash join's, the partition group-by's and the
/// out-of-core join's).
pub fn boundaries(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &DeviceBuffer,
    n: u64,
    bits: u32,
    width: KeyWidth,
) -> Result<DeviceBuffer> {
    digit_boundaries(gpu, stream, keys, n, bits, 0, width)
}

/// The `2^bits + 1` offsets of `n` key words sorted by their bits `[shift, shift + bits)` (an
/// MSB digit when `shift + bits` is the width: the chunkset join's buckets).
pub fn digit_boundaries(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &DeviceBuffer,
    n: u64,
    bits: u32,
    shift: u32,
    width: KeyWidth,
) -> Result<DeviceBuffer> {
    if shift + bits > width.bits() {
        return Err(gpu_error(format!(
            "partition offsets of bits {shift}..{} of a {}-bit key",
            shift + bits,
            width.bits()
        )));
    }
    let parts = 1usize << bits;
    let out = gpu.alloc(stream, (parts + 1) * 4, "partition offsets")?;
    // radix_boundaries_kX(keys, n, bits, shift, offsets): one thread per position 0..=n
    gpu.launch_n(
        stream,
        width.kernel(kernel::RADIX_BOUNDARIES),
        n + 1,
        &[ptr(keys, stream), KArg::U64(n), KArg::U32(bits), KArg::U32(shift), ptr(&out, stream)],
    )?;
    Ok(out)
}
