//! Host-side packing: an Arrow array becomes a [`HostColumn`], a flat list of byte buffers in the
//! layout the device uses, with every offset normalised to zero; [`unpack`] rebuilds the exact
//! array (data type, time zone, precision and scale, values and nulls).
//!
//! Device layouts:
//! - fixed-width types (integers, floats, dates, timestamps, times, durations, Decimal128...):
//!   `[values]`, `len * width` bytes;
//! - Boolean: `[values bitmap]`, LSB-first like Arrow;
//! - Utf8/Binary: `[i32 offsets (len + 1, starting at 0), bytes]`; LargeUtf8/LargeBinary the same
//!   with i64 offsets;
//! - Utf8View/BinaryView: stored as LargeUtf8/LargeBinary (one contiguous byte buffer suits GPU
//!   kernels better than views); the logical type is kept and restored on unpack;
//! - Dictionary: `[keys]` plus one child column, the values.
//! - List (of a supported type, for COUNT(DISTINCT)'s state only: see [`is_supported_list`]):
//!   `[i32 offsets (len + 1, starting at 0)]` plus one child column, the referenced values.
//!
//! Validity is a separate LSB-first bitmap, absent when the column has no nulls.

use std::sync::Arc;

use datafusion::arrow::array::BooleanBufferBuilder;
use datafusion::arrow::array::{Array, ArrayData, ArrayRef, downcast_primitive_array, make_array};
use datafusion::arrow::buffer::{Buffer, MutableBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result};

use crate::device::transfer::Narrowing;

/// An array in device layout, still on the host.
#[derive(Debug, Clone)]
pub struct HostColumn {
    /// The logical Arrow type, restored on unpack.
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    /// LSB-first validity bitmap of `len` bits at bit offset 0, or `None` if there are no nulls.
    pub validity: Option<Buffer>,
    pub buffers: Vec<Buffer>,
    pub children: Vec<HostColumn>,
}

impl HostColumn {
    /// Bytes held in all buffers, children included.
    pub fn byte_size(&self) -> usize {
        self.validity.as_ref().map_or(0, |b| b.len())
            + self.buffers.iter().map(|b| b.len()).sum::<usize>()
            + self.children.iter().map(|c| c.byte_size()).sum::<usize>()
    }
}

/// The type used on the device for `dt` (view types become their large contiguous forms).
pub fn storage_type(dt: &DataType) -> DataType {
    match dt {
        DataType::Utf8View => DataType::LargeUtf8,
        DataType::BinaryView => DataType::LargeBinary,
        other => other.clone(),
    }
}

/// Whether the device layer can hold arrays of type `dt`.
pub fn is_supported(dt: &DataType) -> bool {
    match dt {
        DataType::Boolean
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => true,
        DataType::Dictionary(k, v) => {
            k.is_dictionary_key_type() && is_supported(v) && !matches!(**v, DataType::Dictionary(..))
        }
        other => other.is_primitive(),
    }
}

/// Whether `dt` is a List whose items the device layer can hold: the state of COUNT(DISTINCT),
/// uploaded and downloaded by the GPU aggregate. Kernels other than COUNT(DISTINCT)'s do not read
/// lists, so [`is_supported`] (what the planner accepts elsewhere) does not include them.
pub fn is_supported_list(dt: &DataType) -> bool {
    matches!(dt, DataType::List(f) if is_supported(f.data_type()))
}

fn unsupported(dt: &DataType) -> DataFusionError {
    DataFusionError::NotImplemented(format!("GPU columns of type {dt} are not supported"))
}

/// Bitmap of `len` bits starting at bit `offset` of `buf`, moved to bit offset 0
/// (zero-copy when the offset is a whole byte).
fn bits_from_zero(buf: &Buffer, offset: usize, len: usize) -> Buffer {
    buf.bit_slice(offset, len)
}

/// Packs `array` (any offset, any length) into device layout.
pub fn pack(array: &dyn Array) -> Result<HostColumn> {
    let dt = array.data_type().clone();
    if !is_supported(&dt) && !is_supported_list(&dt) {
        return Err(unsupported(&dt));
    }
    if matches!(dt, DataType::Utf8View | DataType::BinaryView) {
        return pack_views(array);
    }
    let data = array.to_data();
    let (offset, len) = (data.offset(), data.len());
    let (null_count, validity) = match &dt {
        // A row whose key points at a NULL value is NULL: the device column's validity says so,
        // so that no kernel reads such a row's value as valid (COUNT, IN, group keys, joins).
        DataType::Dictionary(..) if data.child_data().first().is_some_and(|v| v.null_count() > 0) => {
            logical_validity(array)
        }
        _ => validity(&data),
    };
    let (buffers, children) = match &dt {
        DataType::Boolean => (vec![bits_from_zero(&data.buffers()[0], offset, len)], vec![]),
        DataType::Utf8 | DataType::Binary => (pack_bytes::<i32>(&data, offset, len), vec![]),
        DataType::LargeUtf8 | DataType::LargeBinary => (pack_bytes::<i64>(&data, offset, len), vec![]),
        DataType::List(_) => {
            let (offsets, first, last) = rebased_offsets::<i32>(&data, offset, len);
            let values = make_array(data.child_data()[0].clone()).slice(first, last - first);
            (vec![offsets], vec![pack(values.as_ref())?])
        }
        DataType::Dictionary(k, _) => {
            let width = k.primitive_width().ok_or_else(|| unsupported(&dt))?;
            let keys = data.buffers()[0].slice_with_length(offset * width, len * width);
            let values = make_array(data.child_data()[0].clone());
            (vec![keys], vec![pack(values.as_ref())?])
        }
        other => {
            let width = other.primitive_width().ok_or_else(|| unsupported(other))?;
            (vec![data.buffers()[0].slice_with_length(offset * width, len * width)], vec![])
        }
    };
    Ok(HostColumn { data_type: dt, len, null_count, validity, buffers, children })
}

/// The logical null count of `array` (a dictionary's NULL values included) and its validity
/// bitmap from bit 0, none without nulls.
fn logical_validity(array: &dyn Array) -> (usize, Option<Buffer>) {
    match array.logical_nulls() {
        Some(n) if n.null_count() > 0 => (n.null_count(), Some(n.inner().sliced())),
        _ => (0, None),
    }
}

/// The null count of `data` and its validity bitmap from bit 0, none without nulls.
fn validity(data: &ArrayData) -> (usize, Option<Buffer>) {
    let null_count = data.null_count();
    match data.nulls() {
        Some(n) if null_count > 0 => (null_count, Some(n.inner().sliced())),
        _ => (null_count, None),
    }
}

/// Rows per task when `len` rows are split over the threads: a share each, at least a quarter
/// of [`PARALLEL_ROWS`].
fn rows_per_task(len: usize) -> usize {
    len.div_ceil(rayon::current_num_threads().max(1)).max(PARALLEL_ROWS / 4)
}

/// Bytes a view holds inline.
const INLINE_VIEW_BYTES: usize = 12;

/// A `Utf8View` / `BinaryView` array in its device storage ([`storage_type`]: the rows' bytes
/// end to end after i64 offsets), made over row ranges on several threads ([`lay_out_views`];
/// Arrow's cast to LargeUtf8 does it on one thread: TPC-H q14's 2 M-row `p_type` build column
/// waited on it). Null rows take no bytes.
fn pack_views(array: &dyn Array) -> Result<HostColumn> {
    let data = array.to_data();
    let len = data.len();
    let datas = std::slice::from_ref(&data);
    let laid = lay_out_views::<i64>(datas, &view_ranges(datas, rows_per_task(len)))?;
    // Each range's offsets are from its own first byte: add where its bytes go (the first
    // range's go at 0, so an array of one range needs nothing).
    let mut offsets = laid.ends;
    if laid.parts.len() > 1 {
        let (mut rest, mut chunks) = (&mut offsets[1..], Vec::with_capacity(laid.parts.len()));
        for p in &laid.parts {
            let (mine, others) = std::mem::take(&mut rest).split_at_mut(p.rows);
            chunks.push((mine, p.base as i64));
            rest = others;
        }
        use rayon::prelude::*;
        chunks.into_par_iter().for_each(|(offs, base)| offs.iter_mut().for_each(|o| *o += base));
    }
    let bytes = match laid.parts.as_slice() {
        [one] => one.bytes.clone(),
        parts => {
            let mut all = Vec::with_capacity(parts.iter().map(|p| p.bytes.len()).sum());
            parts.iter().for_each(|p| all.extend_from_slice(&p.bytes));
            Buffer::from_vec(all)
        }
    };
    let (null_count, validity) = validity(&data);
    Ok(HostColumn {
        data_type: data.data_type().clone(),
        len,
        null_count,
        validity,
        buffers: vec![Buffer::from_vec(offsets), bytes],
        children: vec![],
    })
}

/// Rows a tile of string lengths holds (`OFFSETS_TILE` in `kernels/copy.cu`): the device rebuilds
/// the offsets of an assembled string column a tile at a time, from its rows' lengths and where
/// the tile starts ([`RowLengths`]).
pub const LENGTH_TILE_ROWS: usize = 2048;

/// What [`lay_out_views`] writes for each row of view arrays: where it ends in its range's bytes
/// (an i64 offset, after a leading entry) or its length (u8 or u32).
trait RowEnd: Copy + Default + Send + Sync {
    /// Entries before the first row's: the offsets' leading zero.
    const LEADING: usize;
    /// The entry of a row of `len` bytes that ends at byte `end` of its range.
    fn of(end: usize, len: usize) -> Self;
}

impl RowEnd for i64 {
    const LEADING: usize = 1;
    fn of(end: usize, _: usize) -> i64 {
        end as i64
    }
}

impl RowEnd for u8 {
    const LEADING: usize = 0;
    fn of(_: usize, len: usize) -> u8 {
        len as u8
    }
}

impl RowEnd for u32 {
    const LEADING: usize = 0;
    fn of(_: usize, len: usize) -> u32 {
        len as u32
    }
}

/// The rows of view arrays cut into ranges of at most `per` rows of one array: (array, its
/// rows), in order.
fn view_ranges(datas: &[ArrayData], per: usize) -> Vec<(usize, std::ops::Range<usize>)> {
    datas
        .iter()
        .enumerate()
        .flat_map(|(i, d)| (0..d.len()).step_by(per.max(1)).map(move |a| (i, a..(a + per).min(d.len()))))
        .collect()
}

/// One range's rows laid end to end: their bytes, where they go in the column's bytes, and how
/// many rows they are.
struct ViewPart {
    bytes: Buffer,
    base: usize,
    rows: usize,
}

/// The rows of view arrays laid end to end: an entry per row ([`RowEnd`]; a range's offsets are
/// from its own first byte), each range's bytes, the longest row, and where each tile of
/// [`LENGTH_TILE_ROWS`] rows starts in the column's bytes.
struct ViewLayout<E> {
    ends: Vec<E>,
    parts: Vec<ViewPart>,
    longest: usize,
    tile_starts: Vec<i64>,
}

/// The rows of `ranges` of view arrays laid end to end in one pass over their views, a range per
/// task on several threads: each range copies its rows' bytes into a buffer of its own (placed
/// after the ranges before it once all are done) and writes each row's entry. The views, 16
/// bytes a row, are read once: a cold fill of a 60 M-row column reads a gigabyte of them. A row
/// longer than `E` tells is written short: callers check `longest`.
fn lay_out_views<E: RowEnd>(datas: &[ArrayData], ranges: &[(usize, std::ops::Range<usize>)]) -> Result<ViewLayout<E>> {
    use rayon::prelude::*;
    let rows: usize = ranges.iter().map(|(_, r)| r.len()).sum();
    let mut ends = vec![E::default(); rows + E::LEADING];
    let mut jobs = Vec::with_capacity(ranges.len());
    let (mut rest, mut first_row) = (&mut ends[E::LEADING..], 0usize);
    for (i, r) in ranges {
        let (mine, others) = std::mem::take(&mut rest).split_at_mut(r.len());
        jobs.push((&datas[*i], r.clone(), first_row, mine));
        (rest, first_row) = (others, first_row + r.len());
    }
    // One range (an array of a batch's few thousand rows) is laid out on this thread: a pack
    // of each batch of an upload would otherwise wait on the thread pool.
    let laid: Vec<(Vec<u8>, usize, Vec<i64>)> = if jobs.len() <= 1 {
        jobs.into_iter().map(lay_out_range).collect::<Result<_>>()?
    } else {
        jobs.into_par_iter().map(lay_out_range).collect::<Result<_>>()?
    };
    let (mut parts, mut tile_starts, mut longest, mut base) = (Vec::with_capacity(laid.len()), Vec::new(), 0, 0);
    for ((bytes, most, starts), (_, r)) in laid.into_iter().zip(ranges) {
        tile_starts.extend(starts.into_iter().map(|s| s + base as i64));
        longest = longest.max(most);
        let len = bytes.len();
        parts.push(ViewPart { bytes: Buffer::from_vec(bytes), base, rows: r.len() });
        base += len;
    }
    Ok(ViewLayout { ends, parts, longest, tile_starts })
}

/// One range of [`lay_out_views`]: `rows` of `data`, the first of them row `first_row` of the
/// column, entries into `ends`. Its bytes, its longest row, and where the tiles whose first row
/// it holds start in its bytes.
fn lay_out_range<E: RowEnd>(
    (data, rows, first_row, ends): (&ArrayData, std::ops::Range<usize>, usize, &mut [E]),
) -> Result<(Vec<u8>, usize, Vec<i64>)> {
    let views: &[u128] = &data.buffer::<u128>(0)[data.offset()..data.offset() + data.len()];
    let blocks = &data.buffers()[1..];
    let nulls = data.nulls().filter(|n| n.null_count() > 0);
    // A guess that holds inline rows (at most 12 bytes) without growing; longer rows grow it.
    let mut out: Vec<u8> = Vec::with_capacity(rows.len() * 8 + 64);
    let (mut starts, mut longest) = (Vec::new(), 0usize);
    for (k, row) in rows.enumerate() {
        if (first_row + k) % LENGTH_TILE_ROWS == 0 {
            starts.push(out.len() as i64);
        }
        let v = views[row];
        let n = if nulls.is_some_and(|m| m.is_null(row)) { 0 } else { v as u32 as usize };
        // Inline values are moved as 12 bytes, the next row overwriting the excess: a fixed-size
        // move instead of a copy of the row's length.
        out.reserve(n.max(INLINE_VIEW_BYTES));
        let at = out.len();
        let dst = out.spare_capacity_mut().as_mut_ptr() as *mut u8;
        if n <= INLINE_VIEW_BYTES {
            // SAFETY: 12 bytes of spare capacity were reserved above.
            unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes()[4..].as_ptr(), dst, INLINE_VIEW_BYTES) };
        } else {
            let (block, from) = ((v >> 64) as u32 as usize, (v >> 96) as u32 as usize);
            let src = blocks
                .get(block)
                .and_then(|b| b.as_slice().get(from..from + n))
                .ok_or_else(|| DataFusionError::Internal(format!("view {row} points past its data buffer {block}")))?;
            // SAFETY: n bytes of spare capacity were reserved above.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
        }
        // SAFETY: the row's n bytes were written just above.
        unsafe { out.set_len(at + n) };
        longest = longest.max(n);
        ends[k] = E::of(at + n, n);
    }
    Ok((out, longest, starts))
}

/// Offsets rebased to start at zero, and the referenced bytes only.
fn pack_bytes<O: OffsetInt>(data: &ArrayData, offset: usize, len: usize) -> Vec<Buffer> {
    let (offsets, first, last) = rebased_offsets::<O>(data, offset, len);
    vec![offsets, data.buffers()[1].slice_with_length(first, last - first)]
}

/// The `len + 1` offsets from `offset` of `data`'s first buffer, rebased to start at zero, with
/// the first and last offsets before rebasing.
fn rebased_offsets<O: OffsetInt>(data: &ArrayData, offset: usize, len: usize) -> (Buffer, usize, usize) {
    let offsets: &[O] = &data.buffer::<O>(0)[offset..offset + len + 1];
    let first = offsets[0].as_offset();
    let last = offsets[len].as_offset();
    let rebased = if first == 0 {
        data.buffers()[0].slice_with_length(offset * O::WIDTH, (len + 1) * O::WIDTH)
    } else {
        let mut out = MutableBuffer::with_capacity((len + 1) * O::WIDTH);
        for o in offsets {
            out.push(O::from_offset(o.as_offset() - first));
        }
        out.into()
    };
    (rebased, first, last)
}

/// The two Arrow offset widths.
trait OffsetInt: datafusion::arrow::datatypes::ArrowNativeType {
    const WIDTH: usize;
    fn as_offset(self) -> usize;
    fn from_offset(v: usize) -> Self;
}

impl OffsetInt for i32 {
    const WIDTH: usize = 4;
    fn as_offset(self) -> usize {
        self as usize
    }
    fn from_offset(v: usize) -> Self {
        v as i32
    }
}

impl OffsetInt for i64 {
    const WIDTH: usize = 8;
    fn as_offset(self) -> usize {
        self as usize
    }
    fn from_offset(v: usize) -> Self {
        v as i64
    }
}

/// Rebuilds the Arrow array; validates the buffers against the type.
pub fn unpack(col: HostColumn) -> Result<ArrayRef> {
    let logical = col.data_type.clone();
    let stored = storage_type(&logical);
    let children = col.children.into_iter().map(|c| unpack(c).map(|a| a.to_data())).collect::<Result<Vec<_>>>()?;
    let bytes = matches!(stored, DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary);
    let builder = ArrayData::builder(stored.clone())
        .len(col.len)
        .null_count(col.null_count)
        .null_bit_buffer(col.validity)
        .buffers(col.buffers)
        .child_data(children);
    if bytes && col.len >= PARALLEL_ROWS {
        return unpack_bytes(builder, &logical);
    }
    let array = make_array(builder.build()?);
    if stored != logical { Ok(cast(array.as_ref(), &logical)?) } else { Ok(Arc::clone(&array)) }
}

/// Rows from which a string or binary column is unpacked on several threads. A GPU
/// aggregate's final state comes down as one batch of up to millions of rows, and Arrow's
/// checks of it (UTF-8 of every byte, every offset) and its conversion to views run on one
/// thread: 50-90 ms for the 1.2 million rows of TPC-H q16's state on an H100 host.
pub const PARALLEL_ROWS: usize = 1 << 16;

/// A string or binary column from its downloaded offsets and bytes, with the checks of
/// `ArrayData::validate_data` split over threads (the bytes in chunks cut at character starts,
/// the offsets in row ranges) and, for `Utf8View` / `BinaryView`, the views made in parallel.
fn unpack_bytes(builder: datafusion::arrow::array::ArrayDataBuilder, logical: &DataType) -> Result<ArrayRef> {
    // SAFETY: nothing reads the data before the checks below, which are those of
    // `ArrayData::validate_data`: buffer layout and null count, then every offset (non-negative,
    // non-decreasing, within the bytes and, for strings, at a character start) and the UTF-8 of
    // every byte. The first error is returned and the data dropped unread.
    let data = unsafe { builder.build_unchecked() };
    data.validate()?;
    data.validate_nulls()?;
    let utf8 = matches!(data.data_type(), DataType::Utf8 | DataType::LargeUtf8);
    let small = matches!(data.data_type(), DataType::Utf8 | DataType::Binary);
    if small {
        check_bytes::<i32>(&data, utf8)?
    } else {
        check_bytes::<i64>(&data, utf8)?
    }
    match (logical, small) {
        (DataType::Utf8View | DataType::BinaryView, true) => views::<i32>(&data, logical),
        (DataType::Utf8View | DataType::BinaryView, false) => views::<i64>(&data, logical),
        _ => Ok(make_array(data)),
    }
}

fn corrupt(what: String) -> DataFusionError {
    DataFusionError::Execution(format!("GPU: a downloaded column is not valid Arrow data: {what}"))
}

fn is_char_start(bytes: &[u8], at: usize) -> bool {
    // A UTF-8 continuation byte is 0b10xx_xxxx.
    at == bytes.len() || (bytes[at] as i8) >= -0x40
}

/// Checks the offsets (and, with `utf8`, the bytes) of a variable-width column in parallel.
fn check_bytes<O: datafusion::arrow::array::OffsetSizeTrait>(data: &ArrayData, utf8: bool) -> Result<()> {
    use rayon::prelude::*;
    let values = data.buffers()[1].as_slice();
    let raw: &[O] = &data.buffer::<O>(0)[data.offset()..data.offset() + data.len() + 1];
    let threads = rayon::current_num_threads().clamp(1, data.len().div_ceil(PARALLEL_ROWS / 4).max(1));
    if utf8 {
        // Chunks of the bytes, each cut at a character start: all are valid UTF-8 exactly when
        // the whole is.
        let mut cuts = vec![0usize];
        for k in 1..threads {
            let mut at = (values.len() * k / threads).max(*cuts.last().unwrap_or(&0));
            while !is_char_start(values, at) {
                at += 1;
            }
            cuts.push(at);
        }
        cuts.push(values.len());
        (0..threads).into_par_iter().try_for_each(|k| {
            let (a, b) = (cuts[k], cuts[k + 1]);
            std::str::from_utf8(&values[a..b])
                .map(drop)
                .map_err(|e| corrupt(format!("invalid UTF-8 at byte {}: {e}", a + e.valid_up_to())))
        })?;
    }
    // Row ranges of the offsets; each also compares its first offset with the one before it.
    let per = raw.len().div_ceil(threads).max(1);
    (0..raw.len().div_ceil(per)).into_par_iter().try_for_each(|c| {
        let begin = c * per;
        let end = (begin + per).min(raw.len());
        let mut prev = if begin == 0 { 0 } else { raw[begin - 1].as_usize() };
        for (row, x) in raw[begin..end].iter().enumerate().map(|(i, x)| (begin + i, *x)) {
            if x < O::zero() {
                return Err(corrupt(format!("offset {row} is negative")));
            }
            let o = x.as_usize();
            if o > values.len() {
                return Err(corrupt(format!("offset {row} ({o}) is past the {} bytes", values.len())));
            }
            if o < prev {
                return Err(corrupt(format!("offsets {} and {row} decrease", row.saturating_sub(1))));
            }
            if utf8 && !is_char_start(values, o) {
                return Err(corrupt(format!("offset {row} ({o}) splits a UTF-8 character")));
            }
            prev = o;
        }
        Ok(())
    })
}

/// A `Utf8View` or `BinaryView` array over the checked bytes of `data` (one data buffer, the
/// views made in parallel); Arrow's cast where the bytes exceed a view's 32-bit offsets.
fn views<O: datafusion::arrow::array::OffsetSizeTrait>(data: &ArrayData, logical: &DataType) -> Result<ArrayRef> {
    use datafusion::arrow::array::builder::make_view;
    use datafusion::arrow::array::{BinaryViewArray, StringViewArray};
    use datafusion::arrow::buffer::ScalarBuffer;
    use rayon::prelude::*;
    let values = data.buffers()[1].clone();
    if values.len() > u32::MAX as usize {
        return Ok(cast(make_array(data.clone()).as_ref(), logical)?);
    }
    let bytes = values.as_slice();
    let starts: &[O] = &data.buffer::<O>(0)[data.offset()..data.offset() + data.len() + 1];
    let nulls = data.nulls();
    let mut v = vec![0u128; data.len()];
    let per = rows_per_task(data.len());
    v.par_chunks_mut(per).enumerate().for_each(|(c, out)| {
        for (i, view) in out.iter_mut().enumerate() {
            let row = c * per + i;
            if nulls.is_some_and(|n| n.is_null(row)) {
                continue; // a null's view stays zero
            }
            let (a, b) = (starts[row].as_usize(), starts[row + 1].as_usize());
            *view = make_view(&bytes[a..b], 0, a as u32);
        }
    });
    let views = ScalarBuffer::from(v);
    let nulls = nulls.cloned();
    // SAFETY: every view lies within the one data buffer (offsets checked against its length,
    // which fits in u32) and, for strings, covers whole characters of bytes checked as UTF-8.
    Ok(match logical {
        DataType::Utf8View => Arc::new(unsafe { StringViewArray::new_unchecked(views, vec![values], nulls) }),
        _ => Arc::new(unsafe { BinaryViewArray::new_unchecked(views, vec![values], nulls) }),
    })
}

/// One device buffer assembled from several host buffers: its length and each part with the
/// byte offset it goes to.
#[derive(Debug, Clone)]
pub struct AssembledBuffer {
    pub len: usize,
    pub parts: Vec<(Buffer, usize)>,
}

/// The device layout of several packed columns of one type laid end to end, made of the
/// columns' own buffers where the layout allows (values, string bytes), so that an upload copies
/// each byte once instead of concatenating on the host first. Bitmaps (validity, booleans) and
/// string offsets, which must be rewritten, are rebuilt on the host; they are small.
#[derive(Debug, Clone)]
pub struct AssembledColumn {
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    pub validity: Option<AssembledBuffer>,
    pub buffers: Vec<AssembledBuffer>,
    /// For a string column assembled from views: its offsets (the first buffer, which then has
    /// no host parts) as the rows' lengths, from which the upload rebuilds them on the device.
    pub lengths: Option<RowLengths>,
    /// For an integer or decimal column narrowed ahead of the upload (a table's host image,
    /// [`crate::columns::image`]): its values (the first buffer, which then has no host parts)
    /// in fewer bytes each, which the upload widens on the device.
    pub narrowed: Option<NarrowedValues>,
}

/// A column's values narrowed on the host: every value as `how` stages it (the low bytes, or the
/// distance above a base), all of them fitting.
#[derive(Debug, Clone)]
pub struct NarrowedValues {
    pub how: Narrowing,
    /// The column's values, [`Narrowing::to_bytes`] each.
    pub values: Buffer,
}

/// A string column's offsets sent as its rows' lengths: 1 or 4 bytes a row cross the link
/// instead of 8, and the device rebuilds the i64 offsets a tile of [`LENGTH_TILE_ROWS`] rows at a
/// time, from the tile's lengths and where it starts.
#[derive(Debug, Clone)]
pub struct RowLengths {
    /// Each row's length in `width` bytes, little-endian (a null row 0).
    pub lengths: Buffer,
    /// 1 (every row at most 255 bytes) or 4.
    pub width: usize,
    /// Where each tile's first row starts in the column's bytes (i64).
    pub tile_starts: Buffer,
}

impl AssembledColumn {
    fn whole(buf: Buffer) -> AssembledBuffer {
        AssembledBuffer { len: buf.len(), parts: vec![(buf, 0)] }
    }

    /// Bytes of host memory its parts, lengths and narrowed values hold (a part shared with an
    /// array counts in full).
    pub fn host_bytes(&self) -> usize {
        let parts: usize = self.validity.iter().chain(&self.buffers).flat_map(|b| &b.parts).map(|(p, _)| p.len()).sum();
        let lengths = self.lengths.as_ref().map_or(0, |l| l.lengths.len() + l.tile_starts.len());
        parts + lengths + self.narrowed.as_ref().map_or(0, |n| n.values.len())
    }

    /// The parts of `cols` (packed columns of one type) as one column; `None` for layouts with
    /// children (dictionaries, lists), whose values would need merging, and for `Utf8`/`Binary`
    /// bytes beyond i32 offsets.
    pub fn assemble(cols: &[HostColumn]) -> Option<AssembledColumn> {
        let first = cols.first()?;
        let dt = first.data_type.clone();
        if cols.iter().any(|c| !c.children.is_empty() || c.data_type != dt) {
            return None;
        }
        let len: usize = cols.iter().map(|c| c.len).sum();
        let null_count = cols.iter().map(|c| c.null_count).sum();
        let bitmap =
            |bits: &dyn Fn(&HostColumn) -> Option<&Buffer>| Self::bitmap(len, cols.iter().map(|c| (c.len, bits(c))));
        let validity = cols.iter().any(|c| c.validity.is_some()).then(|| bitmap(&|c| c.validity.as_ref()));
        let buffers = match storage_type(&dt) {
            DataType::Boolean => vec![bitmap(&|c| c.buffers.first())],
            DataType::Utf8 | DataType::Binary => Self::bytes::<i32>(cols)?,
            DataType::LargeUtf8 | DataType::LargeBinary => Self::bytes::<i64>(cols)?,
            other => {
                let width = other.primitive_width()?;
                let mut parts = Vec::with_capacity(cols.len());
                let mut at = 0usize;
                for c in cols {
                    parts.push((c.buffers.first()?.clone(), at));
                    at += c.len * width;
                }
                vec![AssembledBuffer { len: at, parts }]
            }
        };
        Some(AssembledColumn { data_type: dt, len, null_count, validity, buffers, lengths: None, narrowed: None })
    }

    /// Arrays of one fixed-width type (not booleans) without nulls laid end to end: each array's
    /// values buffer is a part as it is, with no packing (a table column of thousands of batches
    /// is that many handles to clone, on several threads); `None` for any other arrays, which
    /// [`pack`] and [`Self::assemble`] take.
    pub fn from_primitives(arrays: &[ArrayRef]) -> Option<AssembledColumn> {
        use rayon::prelude::*;
        let dt = arrays.first()?.data_type();
        if matches!(dt, DataType::Boolean) || !dt.is_primitive() {
            return None;
        }
        let width = dt.primitive_width()?;
        let values: Vec<Buffer> = arrays
            .par_iter()
            .map(|a| {
                if a.data_type() != dt || a.null_count() > 0 {
                    return None;
                }
                let array: &dyn Array = a.as_ref();
                let values = downcast_primitive_array!(array => { array.values().inner().clone() } _ => return None);
                (values.len() == a.len() * width).then_some(values)
            })
            .collect::<Option<_>>()?;
        let mut at = 0usize;
        let parts = values
            .into_iter()
            .map(|v| {
                let part = (v, at);
                at += part.0.len();
                part
            })
            .collect();
        let buffers = vec![AssembledBuffer { len: at, parts }];
        Some(AssembledColumn {
            data_type: dt.clone(),
            len: at / width,
            null_count: 0,
            validity: None,
            buffers,
            lengths: None,
            narrowed: None,
        })
    }

    /// `Utf8View` / `BinaryView` arrays (one type) laid end to end in their device layout, by
    /// ranges of rows on several threads, one pass over the views ([`lay_out_views`]): the rows'
    /// bytes written once each, and in place of the i64 offsets each row's length
    /// in 1 byte (when no row is longer than 255 bytes) or 4, with where each tile of rows starts
    /// ([`RowLengths`]); the upload rebuilds the offsets on the device. Packing each array
    /// ([`pack`]) and then rebuilding the whole column's offsets from theirs ([`Self::assemble`])
    /// takes three passes and two allocations per array, and i64 offsets are 8 bytes a row to
    /// write, stage and send: TPC-H's one-byte flag columns are nine bytes a row that way, two
    /// with lengths.
    pub fn from_views(arrays: &[&dyn Array]) -> Result<AssembledColumn> {
        let first = arrays.first().ok_or_else(|| DataFusionError::Internal("assembling no view arrays".into()))?;
        let dt = first.data_type().clone();
        if !matches!(dt, DataType::Utf8View | DataType::BinaryView) || arrays.iter().any(|a| a.data_type() != &dt) {
            return Err(DataFusionError::Internal(format!("assembling {dt} arrays as views")));
        }
        let datas: Vec<ArrayData> = arrays.iter().map(|a| a.to_data()).collect();
        let len: usize = datas.iter().map(|d| d.len()).sum();
        let packed: Vec<(usize, Option<Buffer>)> = datas.iter().map(validity).collect();
        let null_count = packed.iter().map(|(n, _)| n).sum();
        let validity = (null_count > 0)
            .then(|| Self::bitmap(len, datas.iter().zip(&packed).map(|(d, (_, v))| (d.len(), v.as_ref()))));
        // Ranges of rows of the arrays (a batch's few thousand rows make one) on several threads,
        // with 1-byte lengths unless a row is longer.
        let ranges = view_ranges(&datas, rows_per_task(len));
        let narrow = lay_out_views::<u8>(&datas, &ranges)?;
        let (lengths, width, parts, tile_starts) = if narrow.longest <= u8::MAX as usize {
            (Buffer::from_vec(narrow.ends), 1, narrow.parts, narrow.tile_starts)
        } else {
            drop(narrow);
            let wide = lay_out_views::<u32>(&datas, &ranges)?;
            (Buffer::from_vec(wide.ends), 4, wide.parts, wide.tile_starts)
        };
        let bytes = AssembledBuffer {
            len: parts.iter().map(|p| p.bytes.len()).sum(),
            parts: parts.into_iter().map(|p| (p.bytes, p.base)).collect(),
        };
        Ok(AssembledColumn {
            data_type: dt,
            len,
            null_count,
            validity,
            buffers: vec![AssembledBuffer { len: (len + 1) * 8, parts: vec![] }, bytes],
            lengths: Some(RowLengths { lengths, width, tile_starts: Buffer::from_vec(tile_starts) }),
            narrowed: None,
        })
    }

    /// One bitmap of `len` bits from parts of (rows, LSB-first bits from bit 0, or `None`: all set).
    fn bitmap<'a>(len: usize, parts: impl Iterator<Item = (usize, Option<&'a Buffer>)>) -> AssembledBuffer {
        let mut b = BooleanBufferBuilder::new(len);
        for (rows, bits) in parts {
            match bits {
                Some(v) => b.append_packed_range(0..rows, v.as_slice()),
                None => b.append_n(rows, true),
            }
        }
        Self::whole(b.finish().into_inner())
    }

    /// Offsets rebuilt over the whole column, and each part's bytes placed after the last.
    fn bytes<O: OffsetInt>(cols: &[HostColumn]) -> Option<Vec<AssembledBuffer>> {
        let len: usize = cols.iter().map(|c| c.len).sum();
        let mut offsets = MutableBuffer::with_capacity((len + 1) * O::WIDTH);
        offsets.push(O::from_offset(0));
        let mut parts = Vec::with_capacity(cols.len());
        let mut base = 0usize;
        for c in cols {
            let (offs, data) = (c.buffers.first()?, c.buffers.get(1)?);
            let offs: &[O] = offs.typed_data::<O>();
            for o in offs.iter().skip(1) {
                offsets.push(O::from_offset(base + o.as_offset()));
            }
            parts.push((data.clone(), base));
            base += data.len();
        }
        if O::WIDTH == 4 && base > i32::MAX as usize {
            return None;
        }
        Some(vec![Self::whole(offsets.into()), AssembledBuffer { len: base, parts }])
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::testing::{all_types, assert_same_array, random_array};

    /// pack -> unpack must give back the same array, for every type, length, slice and null mix.
    fn roundtrip(type_idx: usize, len: usize, offset: usize, take: usize, null_pct: u32, seed: u64) {
        let types = all_types();
        let dt = &types[type_idx % types.len()];
        let mut rng = StdRng::seed_from_u64(seed);
        let full = random_array(&mut rng, dt, len + offset, null_pct as f64 / 100.0);
        let take = take.min(len);
        let sliced = full.slice(offset, take);
        let packed = pack(sliced.as_ref()).unwrap();
        assert_eq!(packed.len, take);
        if packed.null_count == 0 {
            assert!(packed.validity.is_none());
        }
        // Device layout has no offsets: string offsets start at zero.
        if matches!(storage_type(dt), DataType::Utf8 | DataType::Binary) {
            assert_eq!(packed.buffers[0].typed_data::<i32>()[0], 0);
        }
        let back = unpack(packed).unwrap();
        assert_same_array(sliced.as_ref(), back.as_ref(), &format!("{dt} len {take} offset {offset} seed {seed}"));
    }

    /// A dictionary row whose key points at a NULL value is NULL in the packed column (its
    /// validity), so that no kernel reads the value as valid; unpacking gives the same values.
    #[test]
    fn dictionary_null_values_pack_as_null_rows() {
        use datafusion::arrow::array::{DictionaryArray, Int8Array, StringArray};
        use datafusion::arrow::datatypes::Int8Type;
        let values: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("b")]));
        let keys = Int8Array::from(vec![Some(0), Some(1), None, Some(2), Some(1), Some(0)]);
        let dict = DictionaryArray::<Int8Type>::try_new(keys, values).unwrap();
        for (offset, len) in [(0, 6), (1, 4), (3, 3)] {
            let a = dict.slice(offset, len);
            let packed = pack(&a).unwrap();
            let want: Vec<bool> = (0..len).map(|i| a.logical_nulls().is_none_or(|n| n.is_valid(i))).collect();
            assert_eq!(packed.null_count, want.iter().filter(|v| !**v).count(), "offset {offset}");
            let validity = packed.validity.clone().expect("a validity bitmap");
            let got: Vec<bool> = (0..len).map(|i| validity.as_slice()[i / 8] & (1 << (i % 8)) != 0).collect();
            assert_eq!(got, want, "offset {offset}");
            assert_same_array(&a, unpack(packed).unwrap().as_ref(), &format!("offset {offset}"));
        }
    }

    /// Large string and binary columns unpack on several threads into the same arrays as
    /// Arrow's own checks and cast give: sliced, with nulls, multi-byte characters, short
    /// (inline) and long values, and bytes that are not UTF-8.
    #[test]
    fn large_byte_columns_unpack_like_arrow() {
        use datafusion::arrow::array::{BinaryArray, BinaryViewArray, LargeBinaryArray};
        use rand::Rng;
        let seed = crate::testing::fresh_seed("large_byte_columns");
        let mut rng = StdRng::seed_from_u64(seed);
        let n = 2 * PARALLEL_ROWS + 13;
        let check = |a: &dyn Array, ctx: &str| {
            let packed = pack(a).unwrap();
            assert!(packed.len >= PARALLEL_ROWS);
            let back = unpack(packed).unwrap();
            assert_same_array(a, back.as_ref(), &format!("{ctx}, seed {seed}"));
        };
        for dt in [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View] {
            for nulls in [0.0, 0.3] {
                let full = random_array(&mut rng, &dt, n + 5, nulls);
                check(full.slice(5, n).as_ref(), &format!("{dt} nulls {nulls}"));
            }
        }
        let values: Vec<Option<Vec<u8>>> = (0..n)
            .map(|i| {
                if i % 7 == 0 { None } else { Some((0..rng.random_range(0..30)).map(|_| rng.random::<u8>()).collect()) }
            })
            .collect();
        let bytes = || values.iter().map(|v| v.as_deref());
        check(&BinaryArray::from_iter(bytes()), "Binary");
        check(&LargeBinaryArray::from_iter(bytes()), "LargeBinary");
        check(&BinaryViewArray::from_iter(bytes()), "BinaryView");
    }

    /// Views pack on several threads into the bytes and offsets Arrow's cast to the storage
    /// type gives: sliced, with nulls, inline (<= 12 bytes) and long values, over several
    /// row ranges and over few.
    #[test]
    fn views_pack_like_arrows_cast() {
        use datafusion::arrow::array::{BinaryViewArray, StringViewArray};
        use rand::Rng;
        let seed = crate::testing::fresh_seed("views_pack_like_arrows_cast");
        let mut rng = StdRng::seed_from_u64(seed);
        for n in [0, 1, 100, 3 * PARALLEL_ROWS + 7] {
            let strings: Vec<Option<String>> = (0..n + 9)
                .map(|_| {
                    (!rng.random_bool(0.2))
                        .then(|| (0..rng.random_range(0..40)).map(|_| rng.random_range('a'..='é')).collect())
                })
                .collect();
            let s = StringViewArray::from_iter(strings.iter().map(|v| v.as_deref()));
            let b = BinaryViewArray::from_iter(strings.iter().map(|v| v.as_deref().map(str::as_bytes)));
            for (a, ctx) in [(&s as &dyn Array, "Utf8View"), (&b as &dyn Array, "BinaryView")] {
                for (at, take) in [(0, n + 9), (9, n)] {
                    let sliced = a.slice(at, take);
                    let got = pack(sliced.as_ref()).unwrap();
                    let want = pack(cast(sliced.as_ref(), &storage_type(a.data_type())).unwrap().as_ref()).unwrap();
                    let ctx = format!("{ctx} n {n} slice {at}+{take}, seed {seed}");
                    assert_eq!(got.data_type, *a.data_type(), "{ctx}");
                    assert_eq!((got.len, got.null_count), (want.len, want.null_count), "{ctx}");
                    assert_eq!(got.validity, want.validity, "{ctx}: validity");
                    assert_eq!(got.buffers[0].typed_data::<i64>(), want.buffers[0].typed_data::<i64>(), "{ctx}");
                    assert_eq!(got.buffers[1].as_slice(), want.buffers[1].as_slice(), "{ctx}: bytes");
                }
            }
        }
    }

    /// The parallel checks reject what Arrow's would: bytes that are not UTF-8, an offset inside
    /// a character, decreasing offsets and offsets past the bytes.
    #[test]
    fn corrupt_large_byte_columns_are_rejected() {
        use datafusion::arrow::array::LargeStringArray;
        let n = PARALLEL_ROWS + 1;
        // Even rows hold one two-byte character.
        let good = LargeStringArray::from_iter_values(
            (0..n).map(|i| if i % 2 == 0 { "é".into() } else { format!("row {i}") }),
        );
        for logical in [DataType::LargeUtf8, DataType::Utf8View] {
            let mut col = pack(&good).unwrap();
            col.data_type = logical.clone();
            assert!(unpack(col.clone()).is_ok(), "{logical}: valid data");
            let offsets = col.buffers[0].typed_data::<i64>().to_vec();
            let with_offsets = |offs: &[i64]| {
                let mut c = col.clone();
                c.buffers[0] = Buffer::from_slice_ref(offs);
                unpack(c)
            };
            let mut bytes = col.buffers[1].as_slice().to_vec();
            let last = bytes.len() - 1;
            bytes[last] = 0xff;
            let mut bad = col.clone();
            bad.buffers[1] = Buffer::from(bytes);
            let e = unpack(bad).unwrap_err().to_string();
            assert!(e.contains("UTF-8"), "{logical}: {e}");
            let mut split = offsets.clone();
            split[1] = 1; // inside row 0's character
            let e = with_offsets(&split).unwrap_err().to_string();
            assert!(e.contains("splits a UTF-8 character"), "{logical}: {e}");
            let mut back = offsets.clone();
            back[6] = back[4]; // row 5 would end before it starts
            let e = with_offsets(&back).unwrap_err().to_string();
            assert!(e.contains("decrease"), "{logical}: {e}");
            let mut past = offsets.clone();
            past[3] = offsets[n] + 100;
            assert!(with_offsets(&past).is_err(), "{logical}: an offset past the bytes");
        }
    }

    /// What an upload of an [`AssembledColumn`] writes, done on the host.
    fn materialize(buf: &AssembledBuffer) -> Buffer {
        let mut out = vec![0u8; buf.len];
        for (part, at) in &buf.parts {
            out[*at..*at + part.len()].copy_from_slice(part.as_slice());
        }
        Buffer::from(out)
    }

    /// The host column an assembled column describes; offsets sent as row lengths are rebuilt
    /// as the device does, a tile at a time from where the tile starts.
    fn materialized(a: &AssembledColumn) -> HostColumn {
        let mut buffers: Vec<Buffer> = a.buffers.iter().map(materialize).collect();
        if let Some(l) = &a.lengths {
            let lengths: Vec<u64> = match l.width {
                1 => l.lengths.as_slice().iter().map(|&n| n as u64).collect(),
                _ => l.lengths.typed_data::<u32>().iter().map(|&n| n as u64).collect(),
            };
            assert_eq!(lengths.len(), a.len, "a length per row");
            let starts = l.tile_starts.typed_data::<i64>();
            assert_eq!(starts.len(), a.len.div_ceil(LENGTH_TILE_ROWS), "a start per tile");
            let mut offsets = vec![0i64];
            for (t, tile) in lengths.chunks(LENGTH_TILE_ROWS).enumerate() {
                let mut end = starts[t];
                for &n in tile {
                    end += n as i64;
                    offsets.push(end);
                }
            }
            buffers[0] = Buffer::from_vec(offsets);
        }
        HostColumn {
            data_type: a.data_type.clone(),
            len: a.len,
            null_count: a.null_count,
            validity: a.validity.as_ref().map(materialize),
            buffers,
            children: vec![],
        }
    }

    /// Assembling packed parts gives the packed concatenation, for every type without children,
    /// odd lengths, slices, nulls and empty parts; so do a fixed-width type's arrays without
    /// nulls assembled as they are ([`AssembledColumn::from_primitives`]), which takes no other.
    #[test]
    fn assembled_columns_equal_the_concatenation() {
        let seed = crate::testing::fresh_seed("assembled_columns");
        let mut rng = StdRng::seed_from_u64(seed);
        for dt in all_types() {
            for nulls in [0.0, 0.4, 1.0] {
                let arrays: Vec<ArrayRef> = [13usize, 0, 8192, 1, 64, 999]
                    .iter()
                    .map(|&len| {
                        let offset = (len * 7 + 3) % 11;
                        random_array(&mut rng, &dt, len + offset, nulls).slice(offset, len)
                    })
                    .collect();
                let parts: Vec<HostColumn> = arrays.iter().map(|a| pack(a.as_ref()).unwrap()).collect();
                let ctx = format!("{dt} nulls {nulls} seed {seed}");
                let Some(a) = AssembledColumn::assemble(&parts) else {
                    assert!(matches!(dt, DataType::Dictionary(..)), "{ctx}: not assembled");
                    continue;
                };
                let col = materialized(&a);
                let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                let want = datafusion::arrow::compute::concat(&refs).unwrap();
                assert_same_array(want.as_ref(), unpack(col.clone()).unwrap().as_ref(), &ctx);
                let fixed_width = dt.is_primitive() && !matches!(dt, DataType::Boolean);
                match AssembledColumn::from_primitives(&arrays) {
                    Some(p) => {
                        assert!(fixed_width && (nulls == 0.0), "{ctx}: taken as values alone");
                        let p = materialized(&p);
                        assert_eq!((p.len, p.null_count, p.validity.is_none()), (col.len, 0, true), "{ctx}");
                        assert_eq!(p.buffers, col.buffers, "{ctx}: values");
                    }
                    None => assert!(!fixed_width || nulls > 0.0, "{ctx}: values alone not taken"),
                }
            }
        }
        // Mixed types are not one column.
        let mixed: Vec<ArrayRef> = vec![
            Arc::new(datafusion::arrow::array::Int32Array::from(vec![1, 2])),
            Arc::new(datafusion::arrow::array::Date32Array::from(vec![3])),
        ];
        assert!(AssembledColumn::from_primitives(&mixed).is_none());
    }

    /// View arrays assembled in one pass give the packed concatenation: inline and out-of-line
    /// values, slices, nulls, empty and all-null parts, arrays split over several ranges and
    /// tiles; offsets go as 1-byte lengths, or 4-byte ones once a row is longer than 255 bytes.
    #[test]
    fn views_assemble_like_the_concatenation() {
        use datafusion::arrow::array::StringViewArray;
        use rand::Rng;
        let seed = crate::testing::fresh_seed("views_assemble");
        let mut rng = StdRng::seed_from_u64(seed);
        for dt in [DataType::Utf8View, DataType::BinaryView] {
            for (nulls, long_row) in [(0.0, false), (0.3, false), (1.0, false), (0.3, true)] {
                let mut arrays: Vec<ArrayRef> = [13usize, 0, 8192, 1, 40_000, 64, 999]
                    .iter()
                    .map(|&len| {
                        let offset = (len * 5 + 2) % 7;
                        let a = random_array(&mut rng, &DataType::Utf8View, len + offset, nulls).slice(offset, len);
                        cast(a.as_ref(), &dt).unwrap()
                    })
                    .collect();
                if long_row {
                    let long = "x".repeat(256 + rng.random_range(0..100));
                    let a: ArrayRef = Arc::new(StringViewArray::from_iter_values(["a", long.as_str(), "bc"]));
                    arrays.insert(3, cast(a.as_ref(), &dt).unwrap());
                }
                let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                let a = AssembledColumn::from_views(&refs).unwrap();
                let width = a.lengths.as_ref().map(|l| l.width);
                assert_eq!(width, Some(if long_row { 4 } else { 1 }), "{dt}: lengths' width");
                let col = materialized(&a);
                let ctx = format!("{dt} nulls {nulls} long row {long_row} seed {seed}");
                let want = datafusion::arrow::compute::concat(&refs).unwrap();
                let packed = pack(want.as_ref()).unwrap();
                assert_eq!(col.buffers, packed.buffers, "{ctx}: device layout");
                assert_same_array(want.as_ref(), unpack(col).unwrap().as_ref(), &ctx);
            }
        }
        let int = datafusion::arrow::array::Int32Array::from(vec![1]);
        assert!(AssembledColumn::from_views(&[&int as &dyn Array]).is_err());
        assert!(AssembledColumn::from_views(&[]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn pack_unpack_roundtrip(
            type_idx in 0usize..64,
            len in 0usize..200,
            offset in 0usize..19,
            take in 0usize..200,
            null_pct in prop_oneof![Just(0u32), Just(100u32), 0u32..100],
            seed in any::<u64>(),
        ) {
            roundtrip(type_idx, len, offset, take, null_pct, seed);
        }
    }

    #[test]
    fn every_type_empty_and_all_null() {
        for i in 0..all_types().len() {
            roundtrip(i, 0, 0, 0, 0, 1);
            roundtrip(i, 0, 5, 0, 50, 2);
            roundtrip(i, 37, 3, 37, 100, 3);
        }
    }

    #[test]
    fn unsupported_types_are_refused_with_a_message() {
        use datafusion::arrow::array::{Int32Array, StructArray};
        use datafusion::arrow::datatypes::Field;
        let strukt = StructArray::from(vec![(
            Arc::new(Field::new("a", DataType::Int32, false)),
            Arc::new(Int32Array::from(vec![1])) as ArrayRef,
        )]);
        let err = pack(&strukt).unwrap_err().to_string();
        assert!(err.contains("not supported"), "{err}");
    }

    /// Lists (COUNT(DISTINCT)'s state) of integers and strings, sliced, with empty and NULL lists
    /// and NULL items, come back as they went.
    #[test]
    fn lists_roundtrip_sliced_with_empty_and_null_lists() {
        use datafusion::arrow::array::{Int64Builder, ListBuilder, StringBuilder};
        let mut ints = ListBuilder::new(Int64Builder::new());
        let mut strs = ListBuilder::new(StringBuilder::new());
        for i in 0..40i64 {
            match i % 5 {
                0 => {
                    ints.append(true);
                    strs.append(true);
                }
                1 => {
                    ints.append_null();
                    strs.append_null();
                }
                _ => {
                    for j in 0..i % 4 {
                        ints.values().append_option((j != 2).then_some(i * 10 + j));
                        strs.values().append_option((j != 1).then(|| format!("v{i}-{j}")));
                    }
                    ints.append(true);
                    strs.append(true);
                }
            }
        }
        for list in [Arc::new(ints.finish()) as ArrayRef, Arc::new(strs.finish()) as ArrayRef] {
            for (offset, len) in [(0, 40), (3, 20), (7, 0), (39, 1)] {
                let sliced = list.slice(offset, len);
                let packed = pack(sliced.as_ref()).unwrap();
                assert_eq!(packed.buffers[0].typed_data::<i32>()[0], 0);
                let back = unpack(packed).unwrap();
                assert_same_array(
                    sliced.as_ref(),
                    back.as_ref(),
                    &format!("{} slice {offset}+{len}", list.data_type()),
                );
            }
        }
    }
}
