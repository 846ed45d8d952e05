//! Packed device columns: the table cache's columns kept in fewer bytes
//! (`gpu.table_cache.compress`), and widened back to their Arrow layout for the operators that
//! read them.
//!
//! - Integers, dates and decimals pack when their values (every slot, null slots included, so
//!   packing loses nothing) lie in a narrow range: as their distance above the least of them in
//!   1, 2 or 3 bytes (a frame of reference: quantities, discounts, dates, keys of a few million),
//!   or else as the values themselves in 4 or 8 bytes (Int64 keys below 2^31, decimals of up to
//!   18 digits). The widths are the [`Narrowing`]s the uploads already use, so the same widening
//!   kernels restore them.
//! - Strings and binaries with few distinct values are kept as a dictionary: each row's code (1
//!   or 2 bytes) into the column's distinct values, kept beside. The encoder (a group-by on the
//!   column, `aggregate::dictionary`) also sums the decoded bytes of every tile of
//!   [`DICTIONARY_TILE_ROWS`] rows, so that widening is two kernels and no scan. Null rows decode
//!   to empty slots (whatever bytes the column had under them), so a widened column may take
//!   fewer bytes than the one that was coded.
//!
//! A device batch of a column packs on its own, with its own range or dictionary.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};
use datafusion::arrow::datatypes::DataType;

use super::DeviceColumn;
use super::concat::offset_width;
use super::device::widen;
use crate::device::kernel::{self, Kernel};
use crate::device::launch::KArg;
use crate::device::transfer::Narrowing;
use crate::device::{DeviceBuffer, Gpu, opt_ptr, ptr};
use crate::error::{Result, gpu_error};

/// Columns whose values take fewer bytes than this stay as they are: their packing and widening
/// would cost launches for little memory.
pub const PACK_MIN_BYTES: usize = 1 << 20;

/// Threads a block of the `value_range_*` kernels.
const RANGE_THREADS: u32 = 256;

/// Rows of a tile of the dictionary kernels (kernels/materialize.cu DICT_TILE), and the threads
/// of their blocks (DICT_THREADS).
pub const DICTIONARY_TILE_ROWS: usize = 2048;
const DICTIONARY_THREADS: u32 = 256;

/// A device column kept in fewer bytes than its Arrow layout; its validity as the column's.
#[derive(Debug)]
pub struct PackedColumn {
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    validity: Option<DeviceBuffer>,
    /// The packed values ([`Form::Narrow`]) or the rows' codes ([`Form::Dictionary`]).
    values: DeviceBuffer,
    form: Form,
}

/// How a [`PackedColumn`] keeps its values.
#[derive(Debug)]
enum Form {
    /// Fixed-width values in fewer bytes.
    Narrow(Narrowing),
    /// Strings or binaries as codes into their distinct values.
    Dictionary(Dictionary),
}

/// The distinct values of a dictionary-coded column and what decoding it needs.
#[derive(Debug)]
struct Dictionary {
    code_bytes: usize,
    values: DeviceColumn,
    /// Where each tile's rows start in the decoded bytes (u64 a tile).
    tile_starts: DeviceBuffer,
    decoded_bytes: usize,
}

/// The parts of a dictionary-coded column, as the encoder made them (see the module's text).
#[derive(Debug)]
pub struct DictionaryParts {
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    pub validity: Option<DeviceBuffer>,
    /// Each row's code, `code_bytes` (1 or 2) bytes a row.
    pub codes: DeviceBuffer,
    pub code_bytes: usize,
    /// The distinct values, a column of `data_type` without children.
    pub values: DeviceColumn,
    /// The u64 start of each tile of [`DICTIONARY_TILE_ROWS`] rows in the decoded bytes.
    pub tile_starts: DeviceBuffer,
    /// The decoded column's bytes (its valid rows' values end to end).
    pub decoded_bytes: usize,
}

/// The dictionary kernels for `code_bytes`-byte codes and `offset_bytes`-byte offsets: tile
/// bytes, offsets and bytes.
fn dictionary_kernels(code_bytes: usize, offset_bytes: usize) -> Result<(Kernel, Kernel, Kernel)> {
    use kernel::*;
    Ok(match (code_bytes, offset_bytes) {
        (1, 4) => (MAT_DICT_TILE_BYTES_K1_O32, MAT_DICT_OFFSETS_K1_O32, MAT_DICT_BYTES_K1_O32),
        (1, 8) => (MAT_DICT_TILE_BYTES_K1_O64, MAT_DICT_OFFSETS_K1_O64, MAT_DICT_BYTES_K1_O64),
        (2, 4) => (MAT_DICT_TILE_BYTES_K2_O32, MAT_DICT_OFFSETS_K2_O32, MAT_DICT_BYTES_K2_O32),
        (2, 8) => (MAT_DICT_TILE_BYTES_K2_O64, MAT_DICT_OFFSETS_K2_O64, MAT_DICT_BYTES_K2_O64),
        (k, o) => return Err(gpu_error(format!("no dictionary decoding for {k}-byte codes and {o}-byte offsets"))),
    })
}

/// The launch shape of a dictionary kernel that takes a block a tile of `rows` rows.
fn tile_launch(rows: usize) -> Result<LaunchConfig> {
    let tiles = u32::try_from(rows.div_ceil(DICTIONARY_TILE_ROWS).max(1))
        .map_err(|_| gpu_error(format!("a dictionary-coded column of {rows} rows is too long")))?;
    Ok(LaunchConfig { grid_dim: (tiles, 1, 1), block_dim: (DICTIONARY_THREADS, 1, 1), shared_mem_bytes: 0 })
}

/// The bytes each tile of [`DICTIONARY_TILE_ROWS`] rows of a dictionary-coded column decodes to
/// (u64 a tile, null rows none): `codes` of `code_bytes` bytes into `values`, `len` rows.
pub fn dictionary_tile_bytes(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    codes: &DeviceBuffer,
    code_bytes: usize,
    validity: Option<&DeviceBuffer>,
    values: &DeviceColumn,
    len: usize,
) -> Result<DeviceBuffer> {
    let ow = offset_width(&values.data_type)
        .ok_or_else(|| gpu_error(format!("a dictionary of {} values", values.data_type)))?;
    let (tile_bytes, _, _) = dictionary_kernels(code_bytes, ow)?;
    let value_offsets = values.buffers.first().ok_or_else(|| gpu_error("a dictionary's values without offsets"))?;
    let sums = gpu.alloc(stream, len.div_ceil(DICTIONARY_TILE_ROWS) * 8, "a dictionary's tile bytes")?;
    if len == 0 {
        return Ok(sums);
    }
    // mat_dict_tile_bytes_*(const K* codes, const u8* validity, const O* value_offsets, u64 n, u64* sums)
    let args = [
        ptr(codes, stream),
        opt_ptr(validity, stream),
        ptr(value_offsets, stream),
        KArg::U64(len as u64),
        ptr(&sums, stream),
    ];
    gpu.launch(stream, tile_bytes, tile_launch(len)?, &args)?;
    Ok(sums)
}

impl PackedColumn {
    /// A dictionary-coded column from its parts, which are checked against each other.
    pub fn dictionary(parts: DictionaryParts) -> Result<PackedColumn> {
        let DictionaryParts {
            data_type,
            len,
            null_count,
            validity,
            codes,
            code_bytes,
            values,
            tile_starts,
            decoded_bytes,
        } = parts;
        let ow = offset_width(&data_type);
        let tiles = len.div_ceil(DICTIONARY_TILE_ROWS);
        let fits = ow.is_some()
            && values.data_type == data_type
            && values.children.is_empty()
            && values.buffers.len() == 2
            && values.buffers[0].len() == (values.len + 1) * ow.unwrap_or(0)
            && matches!(code_bytes, 1 | 2)
            && values.len <= 1 << (8 * code_bytes)
            && codes.len() == len * code_bytes
            && tile_starts.len() == tiles * 8;
        if !fits {
            return Err(gpu_error(format!(
                "a dictionary-coded {data_type} column of {len} rows came with {} bytes of {code_bytes}-byte codes, \
                 {} values of {} and {} bytes of tile starts",
                codes.len(),
                values.len,
                values.data_type,
                tile_starts.len()
            )));
        }
        let form = Form::Dictionary(Dictionary { code_bytes, values, tile_starts, decoded_bytes });
        Ok(PackedColumn { data_type, len, null_count, validity, values: codes, form })
    }

    /// Device bytes it holds.
    pub fn byte_size(&self) -> usize {
        let dictionary = match &self.form {
            Form::Narrow(_) => 0,
            Form::Dictionary(d) => d.values.byte_size() + d.tile_starts.len(),
        };
        self.validity.as_ref().map_or(0, DeviceBuffer::len) + self.values.len() + dictionary
    }

    /// Device bytes the column takes widened.
    pub fn wide_byte_size(&self) -> usize {
        let values = match &self.form {
            Form::Narrow(how) => self.len * how.from_bytes(),
            Form::Dictionary(d) => (self.len + 1) * offset_width(&self.data_type).unwrap_or(8) + d.decoded_bytes,
        };
        self.validity.as_ref().map_or(0, DeviceBuffer::len) + values
    }

    /// How its fixed-width values are packed, when they are.
    pub fn packing(&self) -> Option<Narrowing> {
        match &self.form {
            Form::Narrow(how) => Some(*how),
            Form::Dictionary(_) => None,
        }
    }

    /// The bytes of a code and the number of distinct values, when it is dictionary-coded.
    pub fn dictionary_codes(&self) -> Option<(usize, usize)> {
        match &self.form {
            Form::Narrow(_) => None,
            Form::Dictionary(d) => Some((d.code_bytes, d.values.len)),
        }
    }

    /// How it is kept, as `gpu_table_cache_columns()` shows it: `N-byte values`,
    /// `N-byte offsets` (a frame of reference) or `dictionary, N-byte codes`.
    pub fn encoding(&self) -> String {
        match &self.form {
            Form::Narrow(how @ Narrowing::Offset { .. }) => format!("{}-byte offsets", how.to_bytes()),
            Form::Narrow(how) => format!("{}-byte values", how.to_bytes()),
            Form::Dictionary(d) => format!("dictionary, {}-byte codes", d.code_bytes),
        }
    }

    /// The column at its Arrow width, issued on `stream` (its work is queued there, not done).
    pub fn widen(&self, gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<DeviceColumn> {
        let what = format!("a {} column of {} rows widened from the table cache", self.data_type, self.len);
        let buffers = match &self.form {
            Form::Narrow(how) => {
                let bytes = self.len * how.from_bytes();
                let values = gpu.alloc(stream, bytes, &what)?;
                if bytes > 0 {
                    widen(gpu, stream, &self.values, *how, &values, 0, bytes)?;
                }
                vec![values]
            }
            Form::Dictionary(d) => self.decode(gpu, stream, d, &what)?,
        };
        let validity = self.validity.as_ref().map(|v| gpu.clone_buffer(stream, v, &what)).transpose()?;
        Ok(DeviceColumn {
            data_type: self.data_type.clone(),
            len: self.len,
            null_count: self.null_count,
            validity,
            buffers,
            children: Vec::new(),
        })
    }

    /// The offsets and bytes of the dictionary-coded column's rows.
    fn decode(&self, gpu: &Gpu, stream: &Arc<CudaStream>, d: &Dictionary, what: &str) -> Result<Vec<DeviceBuffer>> {
        let ow =
            offset_width(&self.data_type).ok_or_else(|| gpu_error(format!("a dictionary of {}", self.data_type)))?;
        let (_, offsets_kernel, bytes_kernel) = dictionary_kernels(d.code_bytes, ow)?;
        let offsets = gpu.alloc(stream, (self.len + 1) * ow, what)?;
        let bytes = gpu.alloc(stream, d.decoded_bytes, what)?;
        if self.len == 0 {
            gpu.fill_bytes(stream, &offsets, 0)?;
            return Ok(vec![offsets, bytes]);
        }
        let [value_offsets, value_bytes] = d.values.buffers.as_slice() else {
            return Err(gpu_error("a dictionary's values without offsets and bytes"));
        };
        let (codes, n) = (ptr(&self.values, stream), KArg::U64(self.len as u64));
        let validity = opt_ptr(self.validity.as_ref(), stream);
        // mat_dict_offsets_*(codes, validity, const O* value_offsets, const u64* starts, u64 n, O* out)
        let args = [codes, validity, ptr(value_offsets, stream), ptr(&d.tile_starts, stream), n, ptr(&offsets, stream)];
        gpu.launch(stream, offsets_kernel, tile_launch(self.len)?, &args)?;
        // mat_dict_bytes_*(codes, validity, value_offsets, const u8* value_bytes, const O* out_offsets, u64 n, u8* out)
        let args = [
            codes,
            validity,
            ptr(value_offsets, stream),
            ptr(value_bytes, stream),
            ptr(&offsets, stream),
            n,
            ptr(&bytes, stream),
        ];
        gpu.launch_n(stream, bytes_kernel, self.len as u64, &args)?;
        Ok(vec![offsets, bytes])
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
        let args: Vec<KArg> = [KArg::U64(col.buffers[0].raw_ptr(stream)), ptr(&values, stream), KArg::U64(n)]
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
            form: Form::Narrow(how),
        });
    }
    stream.synchronize().map_err(|e| gpu_error(format!("waiting for columns to be packed: {e}")))?;
    Ok(out)
}

/// The device bytes a column of `data_type` likely takes a row: its width, or its packed width
/// when it is packable ([`packable_width`]) and `range` gives its least and greatest values, or
/// for strings and binaries their offsets and a guess of their bytes.
pub fn likely_row_bytes(data_type: &datafusion::arrow::datatypes::DataType, range: Option<(i64, i64)>) -> u64 {
    use datafusion::arrow::datatypes::DataType;
    let packed = packable_width(data_type)
        .zip(range)
        .map(|(w, (min, max))| packing_for(w, min, max).map_or(w, |how| how.to_bytes()));
    match (data_type, packed) {
        (_, Some(bytes)) => bytes as u64,
        (DataType::Dictionary(k, _), None) => k.primitive_width().unwrap_or(4) as u64,
        (other, None) => other.primitive_width().map_or(24, |w| w as u64),
    }
}

/// A statistic's value as the integer a packed column stores (dates as days or milliseconds,
/// timestamps in their unit, decimals unscaled), when it fits 8 bytes.
pub fn scalar_i64(value: &datafusion::common::ScalarValue) -> Option<i64> {
    use datafusion::common::ScalarValue as S;
    match value {
        S::Int32(Some(v)) | S::Date32(Some(v)) => Some(*v as i64),
        S::Int64(Some(v))
        | S::Date64(Some(v))
        | S::TimestampSecond(Some(v), _)
        | S::TimestampMillisecond(Some(v), _)
        | S::TimestampMicrosecond(Some(v), _)
        | S::TimestampNanosecond(Some(v), _) => Some(*v),
        S::Decimal128(Some(v), _, _) => i64::try_from(*v).ok(),
        _ => None,
    }
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
            assert_eq!(p.packing().map(Narrowing::to_bytes), Some(*bytes), "{what}");
            assert!(p.byte_size() < dev.byte_size() && p.wide_byte_size() == dev.byte_size(), "{what}");
            let wide = p.widen(&gpu, &stream).unwrap();
            let back = download_columns(&gpu, &stream, &[&wide]).unwrap().pop().unwrap();
            let back = unpack(back).unwrap();
            assert_eq!(back.to_data(), array.to_data(), "{what}");
        }
    }

    /// The dictionary kernels' tiles and blocks are the ones the launches assume.
    #[test]
    fn dictionary_tiles_match_the_kernels() {
        let source = include_str!("../../kernels/materialize.cu");
        let define = |name: &str| -> usize {
            let line = source.lines().find(|l| l.starts_with(&format!("#define {name} "))).expect(name);
            line.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect(name)
        };
        assert_eq!(define("DICT_THREADS"), super::DICTIONARY_THREADS as usize);
        assert_eq!(define("DICT_THREADS") * define("DICT_ITEMS"), super::DICTIONARY_TILE_ROWS);
    }

    /// A packable column whose statistics give its range counts the bytes its packing takes; one
    /// without a range, or not packable, counts its width.
    #[test]
    fn likely_row_bytes_count_packed_widths_where_the_range_is_known() {
        use super::likely_row_bytes;
        use datafusion::arrow::datatypes::DataType;
        assert_eq!(likely_row_bytes(&DataType::Int64, None), 8);
        assert_eq!(likely_row_bytes(&DataType::Int64, Some((10, 200))), 1, "a frame of reference in 1 byte");
        assert_eq!(likely_row_bytes(&DataType::Int64, Some((-5, 5_000_000_000))), 8);
        assert_eq!(likely_row_bytes(&DataType::Decimal128(15, 2), Some((0, 10_000_000))), 3);
        assert_eq!(likely_row_bytes(&DataType::Decimal128(15, 2), Some((0, 1 << 40))), 8);
        assert_eq!(likely_row_bytes(&DataType::Decimal128(15, 2), None), 16);
        assert_eq!(likely_row_bytes(&DataType::Date32, Some((8035, 10_591))), 2);
        assert_eq!(likely_row_bytes(&DataType::Utf8, Some((0, 1))), 24, "strings are not packed");
        assert_eq!(likely_row_bytes(&DataType::Float64, Some((0, 1))), 8);
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
