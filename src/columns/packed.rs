//! Packed device columns: the table cache's integers, dates and decimals kept in the fewest
//! bytes their values need (`gpu.table_cache.compress`), and widened back to their Arrow width
//! for the operators that read them.
//!
//! A column packs when its values (every slot, null slots included, so packing loses nothing)
//! lie in a narrow range: as their distance above the least of them in 1, 2 or 3 bytes (a frame
//! of reference: quantities, discounts, dates, keys of a few million), or else as the values
//! themselves in 4 or 8 bytes (Int64 keys below 2^31, decimals of up to 18 digits). The widths
//! are the [`Narrowing`]s the uploads already use, so the same widening kernels restore them.
//! A device batch of a column packs on its own, with its own range.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};
use datafusion::arrow::datatypes::DataType;

use super::DeviceColumn;
use super::device::widen;
use crate::device::kernel::{self, Kernel};
use crate::device::launch::KArg;
use crate::device::transfer::Narrowing;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{Result, gpu_error};

/// Columns whose values take fewer bytes than this stay as they are: their packing and widening
/// would cost launches for little memory.
pub const PACK_MIN_BYTES: usize = 1 << 20;

/// Threads a block of the `value_range_*` kernels.
const RANGE_THREADS: u32 = 256;

/// A device column whose values buffer is packed ([`Narrowing`]); its validity as the column's.
#[derive(Debug)]
pub struct PackedColumn {
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    validity: Option<DeviceBuffer>,
    values: DeviceBuffer,
    how: Narrowing,
}

impl PackedColumn {
    /// Device bytes it holds.
    pub fn byte_size(&self) -> usize {
        self.validity.as_ref().map_or(0, DeviceBuffer::len) + self.values.len()
    }

    /// Device bytes the column takes widened.
    pub fn wide_byte_size(&self) -> usize {
        self.validity.as_ref().map_or(0, DeviceBuffer::len) + self.len * self.how.from_bytes()
    }

    /// How its values are packed.
    pub fn packing(&self) -> Narrowing {
        self.how
    }

    /// The column at its Arrow width, issued on `stream` (its work is queued there, not done).
    pub fn widen(&self, gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<DeviceColumn> {
        let what = format!("a {} column of {} rows widened from the table cache", self.data_type, self.len);
        let bytes = self.len * self.how.from_bytes();
        let values = gpu.alloc(stream, bytes, &what)?;
        if bytes > 0 {
            widen(gpu, stream, &self.values, self.how, &values, 0, bytes)?;
        }
        let validity = self.validity.as_ref().map(|v| gpu.clone_buffer(stream, v, &what)).transpose()?;
        Ok(DeviceColumn {
            data_type: self.data_type.clone(),
            len: self.len,
            null_count: self.null_count,
            validity,
            buffers: vec![values],
            children: Vec::new(),
        })
    }
}

/// Bytes a value of a column of `data_type` takes, when such a column can be packed.
pub fn packable_width(data_type: &DataType) -> Option<usize> {
    match data_type {
        DataType::Int32 | DataType::Date32 => Some(4),
        DataType::Int64 | DataType::Date64 | DataType::Timestamp(..) => Some(8),
        DataType::Decimal128(..) => Some(16),
        _ => None,
    }
}

/// The packing of `from`-byte values (4, 8 or 16) whose least is `min` and greatest `max`
/// (16-byte ones all within 8 bytes), or `None` when none takes fewer bytes: the frame of
/// reference when its 1, 2 or 3 bytes are the fewest, else the values in 4 or 8 bytes.
pub fn packing_for(from: usize, min: i64, max: i64) -> Option<Narrowing> {
    if min > max || !matches!(from, 4 | 8 | 16) {
        return None;
    }
    let span = (max as i128 - min as i128) as u128;
    let offset = match span {
        s if s < 1 << 8 => Some(1),
        s if s < 1 << 16 => Some(2),
        s if s < 1 << 24 => Some(3),
        _ => None,
    };
    let fits_i32 = min >= i32::MIN as i64 && max <= i32::MAX as i64;
    let plain = match from {
        16 if fits_i32 => Some(Narrowing::I128ToI32),
        16 => Some(Narrowing::I128ToI64),
        8 if fits_i32 => Some(Narrowing::I64ToI32),
        _ => None,
    };
    let plain_bytes = plain.map_or(from, Narrowing::to_bytes);
    match offset {
        Some(to) if to < plain_bytes => Narrowing::offset(from, to, min),
        _ => plain,
    }
}

/// The kernel that packs values as `how` says, `(const void* src, void* dst, u64 n)`, and for a
/// frame of reference `(..., i64 base)`.
fn pack_kernel(how: Narrowing) -> Kernel {
    use kernel::*;
    match how {
        Narrowing::I128ToI64 => PACK_I128_TO_I64,
        Narrowing::I128ToI32 => PACK_I128_TO_I32,
        Narrowing::I64ToI32 => PACK_I64_TO_I32,
        Narrowing::Offset { from: 4, to: 1, .. } => PACK_I32_TO_U8,
        Narrowing::Offset { from: 4, to: 2, .. } => PACK_I32_TO_U16,
        Narrowing::Offset { from: 4, .. } => PACK_I32_TO_U24,
        Narrowing::Offset { from: 8, to: 1, .. } => PACK_I64_TO_U8,
        Narrowing::Offset { from: 8, to: 2, .. } => PACK_I64_TO_U16,
        Narrowing::Offset { from: 8, .. } => PACK_I64_TO_U24,
        Narrowing::Offset { to: 1, .. } => PACK_I128_TO_U8,
        Narrowing::Offset { to: 2, .. } => PACK_I128_TO_U16,
        Narrowing::Offset { .. } => PACK_I128_TO_U24,
    }
}

/// The least and greatest values of the blocks' triples `(min, max, wide)` a `value_range_*`
/// launch wrote, or `None` when a 16-byte value does not fit 8 bytes (or there were none).
pub fn reduce_ranges(triples: &[i64]) -> Option<(i64, i64)> {
    let mut range: Option<(i64, i64)> = None;
    for t in triples.chunks_exact(3) {
        if t[2] != 0 {
            return None;
        }
        range = Some(match range {
            None => (t[0], t[1]),
            Some((lo, hi)) => (lo.min(t[0]), hi.max(t[1])),
        });
    }
    range.filter(|(lo, hi)| lo <= hi)
}

/// One column to pack: its values' width and the blocks its range kernel runs.
struct Candidate {
    index: usize,
    width: usize,
    blocks: u32,
    first: usize,
}

/// Packs each of `columns` that can be (a type [`packable_width`] takes, of at least
/// [`PACK_MIN_BYTES`] of values, whose values' range allows it): `None` for the others. Two
/// waits on `stream` in all, however many columns; when it returns, the packed columns' work is
/// done.
pub fn pack_columns(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    columns: &[&DeviceColumn],
) -> Result<Vec<Option<PackedColumn>>> {
    let sms = gpu.info().sm_count.max(1) as u64;
    let mut candidates = Vec::new();
    let mut slots = 0usize;
    for (index, c) in columns.iter().enumerate() {
        let Some(width) = packable_width(&c.data_type) else { continue };
        let [values] = c.buffers.as_slice() else { continue };
        if !c.children.is_empty() || c.len == 0 || values.len() != c.len * width || values.len() < PACK_MIN_BYTES {
            continue;
        }
        let blocks = (c.len as u64).div_ceil(RANGE_THREADS as u64).clamp(1, sms * 4) as u32;
        candidates.push(Candidate { index, width, blocks, first: slots });
        slots += 3 * blocks as usize;
    }
    let mut out: Vec<Option<PackedColumn>> = columns.iter().map(|_| None).collect();
    if candidates.is_empty() {
        return Ok(out);
    }
    let triples = gpu.alloc(stream, slots * 8, "the value ranges of columns to pack")?;
    for c in &candidates {
        let col = columns[c.index];
        let kernel = match c.width {
            4 => kernel::VALUE_RANGE_I32,
            8 => kernel::VALUE_RANGE_I64,
            _ => kernel::VALUE_RANGE_I128,
        };
        let cfg = LaunchConfig { grid_dim: (c.blocks, 1, 1), block_dim: (RANGE_THREADS, 1, 1), shared_mem_bytes: 0 };
        // value_range_*(const void* src, u64 n, i64* out): 3 values a block at out.
        let args = [
            KArg::U64(col.buffers[0].raw_ptr(stream)),
            KArg::U64(col.len as u64),
            KArg::U64(triples.raw_ptr(stream) + (c.first * 8) as u64),
        ];
        gpu.launch(stream, kernel, cfg, &args)?;
    }
    let ranges = gpu.read::<i64>(stream, &triples, 0, slots)?;
    for c in &candidates {
        let col = columns[c.index];
        let block = &ranges[c.first..c.first + 3 * c.blocks as usize];
        let Some(how) = reduce_ranges(block).and_then(|(lo, hi)| packing_for(c.width, lo, hi)) else { continue };
        let what = format!("a packed {} column of {} rows", col.data_type, col.len);
        let values = gpu.alloc(stream, how.narrowed_len(col.buffers[0].len()), &what)?;
        let base = how.base().map(|b| KArg::U64(b as u64));
        let n = col.len as u64;
        let args: Vec<KArg> =
            [KArg::U64(col.buffers[0].raw_ptr(stream)), KArg::U64(values.raw_ptr(stream)), KArg::U64(n)]
                .into_iter()
                .chain(base)
                .collect();
        gpu.launch_n(stream, pack_kernel(how), n, &args)?;
        let validity = col.validity.as_ref().map(|v| gpu.clone_buffer(stream, v, &what)).transpose()?;
        out[c.index] = Some(PackedColumn {
            data_type: col.data_type.clone(),
            len: col.len,
            null_count: col.null_count,
            validity,
            values,
            how,
        });
    }
    stream.synchronize().map_err(|e| gpu_error(format!("waiting for columns to be packed: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::DataType;

    use super::{Narrowing, packable_width, packing_for, reduce_ranges};

    /// The fewest bytes win: a frame of reference of 1, 2 or 3 bytes when the span allows it and
    /// it is narrower than the values truncated; 4 or 8 bytes otherwise; nothing when neither is
    /// narrower than the values.
    #[test]
    fn the_packing_takes_the_fewest_bytes_the_range_allows() {
        let offset = |from, to, base| Narrowing::offset(from, to, base);
        assert_eq!(packing_for(4, 8035, 10591), offset(4, 2, 8035), "dates");
        assert_eq!(packing_for(16, 100, 5000), offset(16, 2, 100), "quantities in cents");
        assert_eq!(packing_for(16, 0, 10), offset(16, 1, 0), "discounts");
        assert_eq!(packing_for(16, 90_000, 10_494_950), offset(16, 3, 90_000), "prices");
        assert_eq!(packing_for(16, -999_99, 999_999_99), Some(Narrowing::I128ToI32), "balances");
        assert_eq!(packing_for(16, 0, 1 << 40), Some(Narrowing::I128ToI64));
        assert_eq!(packing_for(8, 1, 60_000_000), Some(Narrowing::I64ToI32), "order keys");
        assert_eq!(packing_for(8, 1, 2_000_000), offset(8, 3, 1), "part keys");
        assert_eq!(packing_for(8, i64::MIN, i64::MAX), None);
        assert_eq!(packing_for(8, -5, 1 << 40), None);
        assert_eq!(packing_for(4, 0, 1 << 24), None, "4 bytes are no fewer than 4");
        assert_eq!(packing_for(4, i32::MIN as i64, i32::MIN as i64 + 255), offset(4, 1, i32::MIN as i64));
        assert_eq!(packing_for(8, 7, 7), offset(8, 1, 7), "one value");
        assert_eq!(packing_for(8, 9, 7), None, "no values");
        assert_eq!(packing_for(2, 0, 1), None);
        // The span of the extremes does not overflow.
        assert_eq!(packing_for(16, i64::MIN, i64::MAX), Some(Narrowing::I128ToI64));
    }

    /// The blocks' triples reduce to the least and greatest values; a 16-byte value that did not
    /// fit 8 bytes, or no block at all, gives none.
    #[test]
    fn block_ranges_reduce_to_the_columns() {
        assert_eq!(reduce_ranges(&[5, 9, 0, -3, 4, 0, 7, 12, 0]), Some((-3, 12)));
        assert_eq!(reduce_ranges(&[5, 9, 0, -3, 4, 1]), None);
        assert_eq!(reduce_ranges(&[]), None);
        // A block that saw no value (more blocks than values) leaves its empty range.
        assert_eq!(reduce_ranges(&[i64::MAX, i64::MIN, 0, 3, 3, 0]), Some((3, 3)));
    }

    /// On a device: columns of every packable type, with nulls, negative values and the widest
    /// ranges each width takes, come back from packing and widening bit for bit; columns whose
    /// range allows no packing, or too small to pack, stay as they are.
    #[test]
    fn packed_columns_widen_to_their_values() {
        use std::sync::Arc;

        use datafusion::arrow::array::{Array, ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array};
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        use super::pack_columns;
        use crate::columns::{download_columns, pack, unpack, upload_columns};
        use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip};

        const NAME: &str = "packed_columns_widen_to_their_values";
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip(NAME) else { return };
        let seed = fresh_seed(NAME);
        let mut rng = StdRng::seed_from_u64(seed);
        let n = 300_000 + rng.random_range(0..1000);
        let null = |rng: &mut StdRng| rng.random_range(0..7) == 0;
        let i64s = |rng: &mut StdRng, lo: i64, hi: i64| -> ArrayRef {
            Arc::new((0..n).map(|_| (!null(rng)).then(|| rng.random_range(lo..=hi))).collect::<Int64Array>())
        };
        let decimals = |rng: &mut StdRng, lo: i128, hi: i128| -> ArrayRef {
            let values: Vec<Option<i128>> = (0..n).map(|_| (!null(rng)).then(|| rng.random_range(lo..=hi))).collect();
            Arc::new(Decimal128Array::from(values).with_precision_and_scale(38, 2).unwrap())
        };
        // (array, the bytes a value should pack into; 0: not packed)
        let cases: Vec<(ArrayRef, usize)> = vec![
            (Arc::new((0..n).map(|_| Some(rng.random_range(8035..10592))).collect::<Date32Array>()), 2),
            (
                Arc::new(
                    (0..n).map(|_| (!null(&mut rng)).then(|| rng.random_range(-100..100))).collect::<Int32Array>(),
                ),
                1,
            ),
            (Arc::new((0..n).map(|_| Some(rng.random_range(i32::MIN..=i32::MAX))).collect::<Int32Array>()), 0),
            (i64s(&mut rng, -(1 << 23), (1 << 23) - 1), 3),
            (i64s(&mut rng, i32::MIN as i64, i32::MAX as i64), 4),
            (i64s(&mut rng, i64::MIN, i64::MAX), 0),
            (decimals(&mut rng, 0, 10), 1),
            (decimals(&mut rng, -50_000, 50_000), 3),
            (decimals(&mut rng, -(1 << 40), 1 << 40), 8),
            (decimals(&mut rng, i128::MIN / 2, i128::MAX / 2), 0),
            (Arc::new(Int64Array::from_iter_values(0..1000)), 0),
        ];
        let stream = gpu.stream();
        let hosts = cases.iter().map(|(a, _)| pack(a.as_ref()).unwrap()).collect::<Vec<_>>();
        let devs = upload_columns(&gpu, &stream, &hosts).unwrap();
        let packed = pack_columns(&gpu, &stream, &devs.iter().collect::<Vec<_>>()).unwrap();
        for (((array, bytes), dev), packed) in cases.iter().zip(&devs).zip(&packed) {
            let what = format!("{} {:?}, seed {seed}", array.data_type(), packed.as_ref().map(|p| p.packing()));
            let Some(p) = packed else {
                assert_eq!(*bytes, 0, "{what} was not packed");
                continue;
            };
            assert_eq!(p.packing().to_bytes(), *bytes, "{what}");
            assert!(p.byte_size() < dev.byte_size() && p.wide_byte_size() == dev.byte_size(), "{what}");
            let wide = p.widen(&gpu, &stream).unwrap();
            let back = download_columns(&gpu, &stream, &[&wide]).unwrap().pop().unwrap();
            let back = unpack(back).unwrap();
            assert_eq!(back.to_data(), array.to_data(), "{what}");
        }
    }

    #[test]
    fn integers_dates_and_decimals_pack() {
        assert_eq!(packable_width(&DataType::Date32), Some(4));
        assert_eq!(packable_width(&DataType::Int64), Some(8));
        assert_eq!(packable_width(&DataType::Decimal128(15, 2)), Some(16));
        assert_eq!(packable_width(&DataType::Utf8), None);
        assert_eq!(packable_width(&DataType::Float64), None);
    }
}
