//! Columns and batches in device memory, and their upload and download.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};
use datafusion::arrow::array::{Array, ArrayRef, RecordBatchOptions};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::host::{AssembledColumn, HostColumn, LENGTH_TILE_ROWS, RowLengths, pack, unpack};
use crate::device::kernel;
use crate::device::launch::KArg;
use crate::device::transfer::{Landed, NARROWING, Narrow, Narrowing, UploadPiece};
use crate::device::{DeviceBuffer, Gpu, ptr};
use crate::error::{Result, gpu_error};

/// One Arrow array in device memory, in the layout described in [`super::host`].
#[derive(Debug)]
pub struct DeviceColumn {
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    pub validity: Option<DeviceBuffer>,
    pub buffers: Vec<DeviceBuffer>,
    pub children: Vec<DeviceColumn>,
}

impl DeviceColumn {
    /// Device bytes held, children included.
    pub fn byte_size(&self) -> usize {
        self.validity.as_ref().map_or(0, |b| b.len())
            + self.buffers.iter().map(|b| b.len()).sum::<usize>()
            + self.children.iter().map(|c| c.byte_size()).sum::<usize>()
    }

    /// Allocates the device buffers for `host`, without copying.
    fn alloc_like(gpu: &Gpu, stream: &Arc<CudaStream>, host: &HostColumn) -> Result<DeviceColumn> {
        let validity = host.validity.as_ref().map(|v| v.len());
        let buffers = host.buffers.iter().map(|b| b.len());
        let mut col = Self::alloc(gpu, stream, &host.data_type, host.len, host.null_count, validity, buffers)?;
        col.children = host.children.iter().map(|c| DeviceColumn::alloc_like(gpu, stream, c)).collect::<Result<_>>()?;
        Ok(col)
    }

    /// Allocates a column without children: a validity bitmap of `validity` bytes (if any) and
    /// buffers of `buffers` bytes.
    fn alloc(
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        data_type: &DataType,
        len: usize,
        null_count: usize,
        validity: Option<usize>,
        buffers: impl Iterator<Item = usize>,
    ) -> Result<DeviceColumn> {
        let what = format!("a {data_type} column of {len} rows");
        Ok(DeviceColumn {
            data_type: data_type.clone(),
            len,
            null_count,
            validity: validity.map(|v| gpu.alloc(stream, v, &what)).transpose()?,
            buffers: buffers.map(|b| gpu.alloc(stream, b, &what)).collect::<Result<_>>()?,
            children: Vec::new(),
        })
    }

    /// Every buffer in a fixed order: validity, buffers, then each child's.
    fn visit_buffers<'a>(&'a self, out: &mut Vec<&'a DeviceBuffer>) {
        out.extend(self.validity.iter());
        out.extend(self.buffers.iter());
        for c in &self.children {
            c.visit_buffers(out);
        }
    }

    /// Rebuilds the host column shape, taking downloaded buffers in [`Self::visit_buffers`] order.
    fn rebuild(&self, bufs: &mut impl Iterator<Item = Buffer>) -> Result<HostColumn> {
        let mut next = || bufs.next().ok_or_else(|| gpu_error("download returned fewer buffers than the column holds"));
        let validity = if self.validity.is_some() { Some(next()?) } else { None };
        let buffers = self.buffers.iter().map(|_| next()).collect::<Result<Vec<_>>>()?;
        let children = self.children.iter().map(|c| c.rebuild(bufs)).collect::<Result<Vec<_>>>()?;
        Ok(HostColumn {
            data_type: self.data_type.clone(),
            len: self.len,
            null_count: self.null_count,
            validity,
            buffers,
            children,
        })
    }
}

fn host_pieces<'a>(host: &'a HostColumn, dev: &'a DeviceColumn, out: &mut Vec<UploadPiece<'a>>) {
    if let (Some(h), Some(d)) = (&host.validity, &dev.validity) {
        out.push(UploadPiece::new(h, d, 0));
    }
    for (h, d) in host.buffers.iter().zip(&dev.buffers) {
        out.push(UploadPiece::new(h, d, 0));
    }
    for (h, d) in host.children.iter().zip(&dev.children) {
        host_pieces(h, d, out);
    }
}

/// Uploads packed columns in one pipelined pass over the staging buffers.
pub fn upload_columns(gpu: &Gpu, stream: &Arc<CudaStream>, hosts: &[HostColumn]) -> Result<Vec<DeviceColumn>> {
    upload_columns_with(gpu, stream, hosts, true)
}

fn upload_columns_with(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    hosts: &[HostColumn],
    register: bool,
) -> Result<Vec<DeviceColumn>> {
    let devs = hosts.iter().map(|h| DeviceColumn::alloc_like(gpu, stream, h)).collect::<Result<Vec<_>>>()?;
    let narrowed: Vec<Option<(DeviceBuffer, Narrowing)>> = hosts
        .iter()
        .zip(&devs)
        .map(|(h, d)| narrow_buffer(gpu, stream, d, || sample_of(&h.buffers.iter().take(1).collect::<Vec<_>>())))
        .collect();
    let mut pieces = Vec::new();
    for ((h, d), n) in hosts.iter().zip(&devs).zip(&narrowed) {
        let first = pieces.len();
        host_pieces(h, d, &mut pieces);
        narrow_values(&mut pieces[first..], d, n.as_ref());
    }
    upload_pieces(gpu, stream, &pieces, register)?;
    Ok(devs)
}

/// Columns smaller than this upload as they are: widening costs a kernel launch, more than the
/// bytes saved.
const NARROW_MIN_BYTES: usize = 64 << 10;

/// For a column whose values may cross the link narrowed, a device buffer for the narrowed
/// values and the first narrowing to try (see [`UploadPiece::narrow`]):
/// - Int32, Date32, Int64 and Decimal128 of at most 18 digits whose `sample` of host values
///   spans a narrow range: their distance above a base in 1 or 2 bytes, with
///   `gpu.transfer.narrow_offsets` (see [`offset_for`]; the sample is taken only then);
/// - otherwise, Decimal128 of at most 18 digits: 4-byte values with `gpu.transfer.narrow_integers`,
///   else 8-byte ones with `gpu.transfer.narrow_decimals`;
/// - Int64: 4-byte values with `gpu.transfer.narrow_integers`.
///
/// The buffer has room for 2-byte values of a 4-byte column and 8-byte values of a 16-byte
/// one (half the values' bytes): the widest a piece falls back to when its values do not fit
/// (see [`fallback`]). Narrowing divides the staged copy's writes and the link's bytes by 2 to
/// 16. `None` for other columns, small ones, or when the allocation fails (the column then
/// uploads as it is).
fn narrow_buffer<'a>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    dev: &DeviceColumn,
    sample: impl FnOnce() -> Vec<&'a [u8]>,
) -> Option<(DeviceBuffer, Narrowing)> {
    let values = dev.buffers.first()?;
    if !NARROWING || values.len() < NARROW_MIN_BYTES {
        return None;
    }
    let settings = gpu.transfer_settings();
    let width = match dev.data_type {
        DataType::Int32 | DataType::Date32 => 4,
        DataType::Int64 => 8,
        DataType::Decimal128(digits, _) if digits <= 18 => 16,
        _ => return None,
    };
    let offset = settings.narrow_offsets.then(|| offset_for(&sample(), width)).flatten();
    let how = match (offset, &dev.data_type) {
        (Some(how), _) => how,
        (None, DataType::Decimal128(..)) if settings.narrow_integers => Narrowing::I128ToI32,
        (None, DataType::Decimal128(..)) if settings.narrow_decimals => Narrowing::I128ToI64,
        (None, DataType::Int64) if settings.narrow_integers => Narrowing::I64ToI32,
        _ => return None,
    };
    let buffer = gpu.alloc(stream, values.len() / 2, "values narrowed for the upload").ok()?;
    Some((buffer, how))
}

/// Values read from each slice of a column's sample (see [`sample_of`]).
const SAMPLE_VALUES: usize = 512;
/// Slices of a column's values its sample reads, spread over the column.
const SAMPLE_SLICES: usize = 16;

/// The frame-of-reference narrowing ([`Narrowing::Offset`]) for little-endian integers of
/// `width` bytes (4, 8 or 16) whose `sample` spans a narrow range: 1 byte when it spans less than
/// 3/4 of 256, 2 bytes when less than 15/16 of 65,536 (SSB's yyyymmdd dates span 61,129), with
/// the sample's range in the middle of the frame. A piece holding a value outside the frame is
/// staged again at the next width ([`fallback`]): the sample only picks the first try.
fn offset_for(sample: &[&[u8]], width: usize) -> Option<Narrowing> {
    let (mut lo, mut hi, mut seen) = (i64::MAX, i64::MIN, false);
    for slice in sample {
        for v in slice.chunks_exact(width).take(SAMPLE_VALUES) {
            let value = match width {
                4 => i32::from_le_bytes(v.try_into().ok()?) as i64,
                _ => i64::from_le_bytes(v[..8].try_into().ok()?),
            };
            // A 16-byte value past 64 bits has no 64-bit frame.
            if width == 16 && v[8..16].iter().any(|&b| b != if value < 0 { 0xFF } else { 0 }) {
                return None;
            }
            (lo, hi, seen) = (lo.min(value), hi.max(value), true);
        }
    }
    if !seen {
        return None;
    }
    let span = (hi as i128 - lo as i128) as u128;
    let (to, room) = match span {
        s if s < 192 => (1, 256u128),
        s if s < 61_440 => (2, 65_536),
        _ => return None,
    };
    let base = i64::try_from(lo as i128 - ((room - 1 - span) / 2) as i128).ok()?;
    Narrowing::offset(width, to, base)
}

/// Up to [`SAMPLE_SLICES`] slices of `parts` (a column's values, in pieces), spread over them:
/// what [`offset_for`] reads to choose a frame.
fn sample_of<'a>(parts: &[&'a Buffer]) -> Vec<&'a [u8]> {
    if parts.len() >= SAMPLE_SLICES {
        // The first and the last parts, and others evenly between.
        return (0..SAMPLE_SLICES).map(|k| parts[k * (parts.len() - 1) / (SAMPLE_SLICES - 1)].as_slice()).collect();
    }
    // Few large parts: slices from several places in each, cut on 16 bytes (a whole value of
    // any width).
    let per = SAMPLE_SLICES / parts.len().max(1);
    parts
        .iter()
        .flat_map(|b| {
            let bytes = b.as_slice();
            (0..per).map(move |k| &bytes[(bytes.len() * k / per) & !15..])
        })
        .collect()
}

/// The narrowing a piece whose values did not fit `how` is staged again with, or `None`: as it
/// is. Decimals that do not fit in 4 bytes may still fit in 8; values outside a frame of
/// reference take the column type's narrowing without one.
fn fallback(gpu: &Gpu, how: Narrowing) -> Option<Narrowing> {
    let settings = gpu.transfer_settings();
    match how {
        Narrowing::I128ToI32 => settings.narrow_decimals.then_some(Narrowing::I128ToI64),
        Narrowing::Offset { from: 16, .. } if settings.narrow_integers => Some(Narrowing::I128ToI32),
        Narrowing::Offset { from: 16, .. } => settings.narrow_decimals.then_some(Narrowing::I128ToI64),
        Narrowing::Offset { from: 8, .. } => settings.narrow_integers.then_some(Narrowing::I64ToI32),
        _ => None,
    }
}

/// Marks the pieces of `dev`'s values buffer (among `pieces`) to be narrowed into `narrowed`.
fn narrow_values<'a>(
    pieces: &mut [UploadPiece<'a>],
    dev: &'a DeviceColumn,
    narrowed: Option<&'a (DeviceBuffer, Narrowing)>,
) {
    let (Some((into, how)), Some(values)) = (narrowed, dev.buffers.first()) else { return };
    for p in pieces.iter_mut().filter(|p| std::ptr::eq(p.dst, values)) {
        p.narrow = Some(Narrow { into, how: *how });
    }
}

/// Uploads `pieces`, then widens on the device the values that crossed the link narrowed, and
/// uploads again the pieces holding a value that did not fit (a column whose values exceed
/// 32 bits or its declared precision, or whose null slots hold large values): narrowed at the
/// next width when there is one (see [`fallback`]), else as they are, until every piece is in.
fn upload_pieces(gpu: &Gpu, stream: &Arc<CudaStream>, pieces: &[UploadPiece<'_>], register: bool) -> Result<()> {
    let mut todo: Vec<UploadPiece<'_>> = pieces.to_vec();
    // Each round narrows the pieces it sends again less than the last (or not at all), so at
    // most three rounds run. The widening kernels of a round are issued on `stream` before the
    // next round's copies, which may overwrite the narrowed buffer they read. Only the first
    // round counts as an upload of the host buffers: a retry is not a second upload that would
    // page-lock them (see [`Gpu::upload`]).
    let mut register = register;
    while !todo.is_empty() {
        let landed = gpu.upload_with(stream, &todo, std::mem::take(&mut register))?;
        // Narrowed pieces that lie end to end in one buffer are widened by one launch:
        // (narrowed buffer, how, values buffer, byte offset in the values, bytes).
        type Run<'b> = (&'b DeviceBuffer, Narrowing, &'b DeviceBuffer, usize, usize);
        let widen_run = |(into, how, dst, at, bytes): Run<'_>| widen(gpu, stream, into, how, dst, at, bytes);
        let mut run: Option<Run<'_>> = None;
        let mut again = Vec::new();
        for (p, l) in todo.iter().zip(&landed) {
            match (l, p.narrow) {
                (Landed::Narrow, Some(Narrow { into, how })) => {
                    run = match run {
                        Some((i, h, d, at, n))
                            if std::ptr::eq(i, into)
                                && h == how
                                && std::ptr::eq(d, p.dst)
                                && at + n == p.dst_offset =>
                        {
                            Some((i, h, d, at, n + p.src.len()))
                        }
                        Some(prev) => {
                            widen_run(prev)?;
                            Some((into, how, p.dst, p.dst_offset, p.src.len()))
                        }
                        None => Some((into, how, p.dst, p.dst_offset, p.src.len())),
                    };
                }
                (Landed::Overflow, narrow) => {
                    let narrow = narrow.and_then(|n| fallback(gpu, n.how).map(|how| Narrow { how, ..n }));
                    again.push(UploadPiece { narrow, ..*p });
                }
                _ => {}
            }
        }
        if let Some(last) = run {
            widen_run(last)?;
        }
        todo = again;
    }
    Ok(())
}

/// Widens on `stream` the values `how` narrowed into `into` that belong at byte `at` of `dst`, for
/// `bytes` bytes of `dst` (the narrowed values of a buffer lie at [`Narrowing::narrowed_len`] of
/// `at` in `into`).
pub(super) fn widen(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    into: &DeviceBuffer,
    how: Narrowing,
    dst: &DeviceBuffer,
    at: usize,
    bytes: usize,
) -> Result<()> {
    // widen_*(const void* src, void* dst, u64 n): dst holds n values of the full width.
    let n = (bytes / how.from_bytes()) as u64;
    let src = into.raw_ptr(stream) + how.narrowed_len(at) as u64;
    let out = dst.raw_ptr(stream) + at as u64;
    // A frame of reference adds its base: widen_*(src, dst, n, i64 base).
    let base = how.base().map(|b| KArg::U64(b as u64));
    let args: Vec<KArg> = [KArg::U64(src), KArg::U64(out), KArg::U64(n)].into_iter().chain(base).collect();
    gpu.launch_n(stream, how.widen_kernel(), n, &args)
}

/// Writes the `rows + 1` i64 offsets of a string column into `offsets` from its rows' lengths
/// and its tiles' starts, uploaded into `lens` and `starts` (see [`RowLengths`]).
fn offsets_from_lengths(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    host: &RowLengths,
    lens: &DeviceBuffer,
    starts: &DeviceBuffer,
    offsets: &DeviceBuffer,
    rows: usize,
) -> Result<()> {
    if rows == 0 {
        return gpu.fill_bytes(stream, offsets, 0);
    }
    let tiles = rows.div_ceil(LENGTH_TILE_ROWS);
    if lens.len() != rows * host.width || starts.len() != tiles * 8 || offsets.len() != (rows + 1) * 8 {
        return Err(gpu_error(format!(
            "a string column of {rows} rows came with {} bytes of {}-byte lengths and {} bytes of tile starts \
             for {} bytes of offsets",
            lens.len(),
            host.width,
            starts.len(),
            offsets.len()
        )));
    }
    let kernel = if host.width == 1 { kernel::OFFSETS_FROM_U8_LENGTHS } else { kernel::OFFSETS_FROM_U32_LENGTHS };
    let blocks = u32::try_from(tiles).map_err(|_| gpu_error(format!("a string column of {rows} rows is too long")))?;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // offsets_from_*_lengths(const L* lengths, const u64* starts, u64* out, u64 n): a block per tile
    // of LENGTH_TILE_ROWS rows, 256 threads.
    gpu.launch(
        stream,
        kernel,
        cfg,
        &[ptr(lens, stream), ptr(starts, stream), ptr(offsets, stream), KArg::U64(rows as u64)],
    )
}

/// Downloads columns into packed host form (pinned Arrow buffers).
pub fn download_columns(gpu: &Gpu, stream: &Arc<CudaStream>, cols: &[&DeviceColumn]) -> Result<Vec<HostColumn>> {
    let mut bufs = Vec::new();
    for c in cols {
        c.visit_buffers(&mut bufs);
    }
    let mut host = gpu.download(stream, &bufs)?.into_iter();
    cols.iter().map(|c| c.rebuild(&mut host)).collect()
}

/// The unit GPU execs exchange: a schema, device columns and a row count. Work that produced
/// the columns was issued on `stream`; consumers issue theirs on the same stream (or make their
/// stream wait on it). Consecutive batches may sit on different streams, so that one batch's
/// transfer overlaps the kernels of the one before.
#[derive(Debug, Clone)]
pub struct DeviceBatch {
    schema: SchemaRef,
    columns: Vec<Arc<DeviceColumn>>,
    num_rows: usize,
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
}

/// Host batches made ready for an upload: the host side of [`DeviceBatch::upload`] and
/// [`DeviceBatch::upload_concat`], kept apart so that its time can be told from the copies'.
pub enum HostUpload {
    /// The packed columns of one batch (page-locked on a second upload when `register`).
    Packed { schema: SchemaRef, rows: usize, columns: Vec<HostColumn>, register: bool },
    /// Columns assembled from several batches' own buffers (see [`AssembledColumn`]).
    Assembled { schema: SchemaRef, rows: usize, columns: Vec<AssembledColumn> },
}

impl HostUpload {
    /// `batch`'s columns packed into device layout.
    pub fn pack(batch: &RecordBatch, register: bool) -> Result<Self> {
        let columns = batch.columns().iter().map(|a| pack(a.as_ref())).collect::<Result<Vec<_>>>()?;
        Ok(HostUpload::Packed { schema: batch.schema(), rows: batch.num_rows(), columns, register })
    }

    /// The rows of several host batches of one schema as one upload, each byte to be copied
    /// once (into the staging buffers): every column is assembled from the batches' own buffers
    /// ([`AssembledColumn`]) instead of being concatenated on the host first, except
    /// dictionaries and lists, for which the batches are concatenated. Never page-locked in
    /// place (see [`Gpu::upload_transient`]).
    pub fn assemble(batches: &[RecordBatch]) -> Result<Self> {
        let first = batches.first().ok_or_else(|| gpu_error("uploading no batches"))?;
        if first.num_columns() == 0 {
            // Rows without columns (COUNT(*) over a scan that reads none).
            let rows = batches.iter().map(RecordBatch::num_rows).sum();
            return Ok(HostUpload::Assembled { schema: first.schema(), rows, columns: Vec::new() });
        }
        let columns: Vec<Vec<ArrayRef>> =
            (0..first.num_columns()).map(|i| batches.iter().map(|b| Arc::clone(b.column(i))).collect()).collect();
        let columns: Vec<&[ArrayRef]> = columns.iter().map(Vec::as_slice).collect();
        Self::assemble_columns(first.schema(), &columns, &[])
    }

    /// As [`HostUpload::assemble`], for a table's columns given each as its arrays in order (the
    /// `i`-th array of every column is one batch's): a cache fill of a few of a table's columns
    /// reads them without making a batch per host batch (SF10's `lineorder`: 7,300). `images`
    /// (empty, or one per column) gives the columns laid out ahead ([`crate::columns::image`]),
    /// which go as they are; the others are assembled from their arrays.
    pub fn assemble_columns(
        schema: SchemaRef,
        columns: &[&[ArrayRef]],
        images: &[Option<&AssembledColumn>],
    ) -> Result<Self> {
        let rows: usize =
            columns.first().ok_or_else(|| gpu_error("uploading no columns"))?.iter().map(|a| a.len()).sum();
        if schema.fields().len() != columns.len()
            || columns.iter().any(|c| c.iter().map(|a| a.len()).sum::<usize>() != rows)
        {
            return Err(gpu_error(format!(
                "assembling {} columns of unequal rows for a schema of {} fields",
                columns.len(),
                schema.fields().len()
            )));
        }
        let concat_first = || -> Result<Self> {
            let arrays = columns
                .iter()
                .map(|c| concat(&c.iter().map(|a| a.as_ref()).collect::<Vec<_>>()))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let opts = RecordBatchOptions::new().with_row_count(Some(rows));
            Self::pack(&RecordBatch::try_new_with_options(Arc::clone(&schema), arrays, &opts)?, false)
        };
        if schema.fields().iter().any(|f| matches!(f.data_type(), DataType::Dictionary(..) | DataType::List(_))) {
            return concat_first();
        }
        if !images.is_empty() && images.len() != columns.len() {
            return Err(gpu_error(format!("{} column images for {} columns", images.len(), columns.len())));
        }
        let image = |i: usize| images.get(i).copied().flatten();
        for (i, field) in schema.fields().iter().enumerate() {
            if let Some(image) = image(i)
                && (image.len != rows || &image.data_type != field.data_type())
            {
                return Err(gpu_error(format!(
                    "the host image of column '{}' holds {} x {} rows, not {} x {rows}",
                    field.name(),
                    image.data_type,
                    image.len,
                    field.data_type()
                )));
            }
        }
        // A table's batches are often a few thousand rows each, and packing an array takes a
        // fraction of a microsecond: the columns and their batches are packed on several threads
        // (on one, a cold cache fill of SSB's four 60 M-row lineorder columns waited about 17 ms
        // before its staging began, which then took 23 ms).
        use rayon::prelude::*;
        let assembled = |(i, (field, arrays)): (usize, (&datafusion::arrow::datatypes::FieldRef, &&[ArrayRef]))| {
            if let Some(image) = image(i) {
                return Ok(Some(image.clone()));
            }
            if matches!(field.data_type(), DataType::Utf8View | DataType::BinaryView) {
                let arrays: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                return AssembledColumn::from_views(&arrays).map(Some);
            }
            if let Some(column) = AssembledColumn::from_primitives(arrays) {
                return Ok(Some(column));
            }
            let parts = arrays.par_iter().map(|a| pack(a.as_ref())).collect::<Result<Vec<_>>>()?;
            Ok(AssembledColumn::assemble(&parts))
        };
        let assembled: Vec<Option<AssembledColumn>> =
            schema.fields().par_iter().zip(columns.par_iter()).enumerate().map(assembled).collect::<Result<_>>()?;
        match assembled.into_iter().collect::<Option<Vec<AssembledColumn>>>() {
            Some(columns) => Ok(HostUpload::Assembled { schema, rows, columns }),
            None => concat_first(),
        }
    }
}

impl DeviceBatch {
    pub fn try_new(
        schema: SchemaRef,
        columns: Vec<Arc<DeviceColumn>>,
        num_rows: usize,
        gpu: Arc<Gpu>,
        stream: Arc<CudaStream>,
    ) -> Result<Self> {
        if schema.fields().len() != columns.len() {
            return Err(gpu_error(format!(
                "device batch has {} columns for a schema of {} fields",
                columns.len(),
                schema.fields().len()
            )));
        }
        for (f, c) in schema.fields().iter().zip(&columns) {
            if f.data_type() != &c.data_type || c.len != num_rows {
                return Err(gpu_error(format!(
                    "device column for field '{}' is {} x {} rows, expected {} x {num_rows}",
                    f.name(),
                    c.data_type,
                    c.len,
                    f.data_type()
                )));
            }
        }
        Ok(DeviceBatch { schema, columns, num_rows, gpu, stream })
    }

    /// Packs and uploads a host batch.
    pub fn upload(gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, batch: &RecordBatch) -> Result<Self> {
        Self::upload_with(gpu, stream, batch, true)
    }

    /// Like [`DeviceBatch::upload`], for a batch made to be uploaded once (e.g. concatenated
    /// input): never page-locked in place (see [`Gpu::upload_transient`]).
    pub fn upload_transient(gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, batch: &RecordBatch) -> Result<Self> {
        Self::upload_with(gpu, stream, batch, false)
    }

    fn upload_with(gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, batch: &RecordBatch, register: bool) -> Result<Self> {
        Self::upload_prepared(gpu, stream, HostUpload::pack(batch, register)?)
    }

    /// Uploads what [`HostUpload::pack`] or [`HostUpload::assemble`] prepared on the host.
    pub fn upload_prepared(gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, host: HostUpload) -> Result<Self> {
        let (schema, rows, cols) = match host {
            HostUpload::Packed { schema, rows, columns, register } => {
                (schema, rows, upload_columns_with(gpu, stream, &columns, register)?)
            }
            HostUpload::Assembled { schema, rows, columns } => {
                crate::timeline::mark("upload", || format!("{} columns of {rows} rows assembled", columns.len()));
                // Values narrowed ahead must hold every row, and widen into the column's values,
                // before anything is sent.
                for a in &columns {
                    if let Some(host) = &a.narrowed
                        && (host.values.len() != a.len * host.how.to_bytes()
                            || a.buffers.first().is_none_or(|b| b.len < a.len * host.how.from_bytes()))
                    {
                        return Err(gpu_error(format!(
                            "narrowed values of {} bytes for {} rows of {}",
                            host.values.len(),
                            a.len,
                            a.data_type
                        )));
                    }
                }
                let cols = columns
                    .iter()
                    .map(|a| {
                        let (validity, buffers) = (a.validity.as_ref().map(|v| v.len), a.buffers.iter().map(|b| b.len));
                        DeviceColumn::alloc(gpu, stream, &a.data_type, a.len, a.null_count, validity, buffers)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let narrowed: Vec<Option<(DeviceBuffer, Narrowing)>> = columns
                    .iter()
                    .zip(&cols)
                    .map(|(a, d)| {
                        // Values narrowed ahead go as they are.
                        if a.narrowed.is_some() {
                            return None;
                        }
                        let sample = || {
                            let parts: Vec<&Buffer> =
                                a.buffers.first().map(|b| b.parts.iter().map(|(p, _)| p).collect()).unwrap_or_default();
                            sample_of(&parts)
                        };
                        narrow_buffer(gpu, stream, d, sample)
                    })
                    .collect();
                // String columns whose offsets cross the link as row lengths: device buffers for
                // the lengths and the tiles' starts.
                let lengths: Vec<Option<(DeviceBuffer, DeviceBuffer)>> = columns
                    .iter()
                    .map(|a| {
                        a.lengths
                            .as_ref()
                            .map(|l| -> Result<_> {
                                Ok((
                                    gpu.alloc(stream, l.lengths.len(), "string lengths for the upload")?,
                                    gpu.alloc(stream, l.tile_starts.len(), "string tile starts for the upload")?,
                                ))
                            })
                            .transpose()
                    })
                    .collect::<Result<_>>()?;
                // Values narrowed ahead: a device buffer for them, widened once they are in.
                let ahead: Vec<Option<DeviceBuffer>> = columns
                    .iter()
                    .map(|a| {
                        a.narrowed
                            .as_ref()
                            .map(|n| gpu.alloc(stream, n.values.len(), "narrowed values for the upload"))
                            .transpose()
                    })
                    .collect::<Result<_>>()?;
                crate::timeline::mark("upload", || "device buffers allocated".into());
                let mut pieces = Vec::new();
                for ((((a, d), n), l), ahead) in columns.iter().zip(&cols).zip(&narrowed).zip(&lengths).zip(&ahead) {
                    let first = pieces.len();
                    let host = a.validity.iter().chain(&a.buffers);
                    for (h, dev) in host.zip(d.validity.iter().chain(&d.buffers)) {
                        for (src, at) in &h.parts {
                            pieces.push(UploadPiece::new(src, dev, *at));
                        }
                    }
                    narrow_values(&mut pieces[first..], d, n.as_ref());
                    if let (Some(host), Some((lens, starts))) = (&a.lengths, l) {
                        pieces.push(UploadPiece::new(&host.lengths, lens, 0));
                        pieces.push(UploadPiece::new(&host.tile_starts, starts, 0));
                    }
                    if let (Some(host), Some(into)) = (&a.narrowed, ahead) {
                        pieces.push(UploadPiece::new(&host.values, into, 0));
                    }
                }
                upload_pieces(gpu, stream, &pieces, false)?;
                for ((a, d), ahead) in columns.iter().zip(&cols).zip(&ahead) {
                    if let (Some(host), Some(into), Some(values)) = (&a.narrowed, ahead, d.buffers.first()) {
                        widen(gpu, stream, into, host.how, values, 0, a.len * host.how.from_bytes())?;
                    }
                }
                for ((a, d), l) in columns.iter().zip(&cols).zip(&lengths) {
                    if let (Some(host), Some((lens, starts)), Some(offsets)) = (&a.lengths, l, d.buffers.first()) {
                        offsets_from_lengths(gpu, stream, host, lens, starts, offsets, a.len)?;
                    }
                }
                crate::timeline::mark("upload", || "pieces widened".into());
                // The host parts are a handle per host batch and column: dropped a column a thread.
                drop(pieces);
                use rayon::prelude::*;
                columns.into_par_iter().for_each(drop);
                (schema, rows, cols)
            }
        };
        DeviceBatch::try_new(
            schema,
            cols.into_iter().map(Arc::new).collect(),
            rows,
            Arc::clone(gpu),
            Arc::clone(stream),
        )
    }

    /// The rows of several host batches of one schema as one device batch, each byte copied once
    /// (into the staging buffers): every column is assembled from the batches' own buffers
    /// ([`AssembledColumn`]) instead of being concatenated on the host first, except dictionaries
    /// and lists, for which the batches are concatenated. Never page-locked in place (see
    /// [`Gpu::upload_transient`]).
    pub fn upload_concat(gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, batches: &[RecordBatch]) -> Result<Self> {
        Self::upload_prepared(gpu, stream, HostUpload::assemble(batches)?)
    }

    /// As [`DeviceBatch::upload_concat`], for columns given each as its arrays in order, with
    /// their `schema` (see [`HostUpload::assemble_columns`]).
    pub fn upload_concat_columns(
        gpu: &Arc<Gpu>,
        stream: &Arc<CudaStream>,
        schema: SchemaRef,
        columns: &[&[ArrayRef]],
        images: &[Option<&AssembledColumn>],
    ) -> Result<Self> {
        Self::upload_prepared(gpu, stream, HostUpload::assemble_columns(schema, columns, images)?)
    }

    /// Downloads into a host batch with the same schema.
    pub fn download(&self) -> Result<RecordBatch> {
        let cols: Vec<&DeviceColumn> = self.columns.iter().map(|c| c.as_ref()).collect();
        let hosts = download_columns(&self.gpu, &self.stream, &cols)?;
        let arrays = hosts.into_iter().map(unpack).collect::<Result<Vec<_>>>()?;
        let opts = RecordBatchOptions::new().with_row_count(Some(self.num_rows));
        Ok(RecordBatch::try_new_with_options(Arc::clone(&self.schema), arrays, &opts)?)
    }

    /// One batch of `schema` holding every row of `parts` in order, built on `stream` (the parts'
    /// work must be complete: a part made on another stream is synchronised first). A single part
    /// is shared, not copied.
    pub fn concat(gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, schema: SchemaRef, parts: &[DeviceBatch]) -> Result<Self> {
        if parts.is_empty() {
            return Err(gpu_error("concatenating no device batches"));
        }
        let rows = parts.iter().map(|p| p.num_rows).sum();
        if let [one] = parts {
            return DeviceBatch::try_new(schema, one.columns.clone(), rows, Arc::clone(gpu), Arc::clone(&one.stream));
        }
        for p in parts {
            if p.columns.len() != schema.fields().len() {
                return Err(gpu_error(format!(
                    "concatenating a batch of {} columns into a schema of {}",
                    p.columns.len(),
                    schema.fields().len()
                )));
            }
            if !Arc::ptr_eq(&p.stream, stream) {
                p.stream.synchronize().map_err(|e| gpu_error(format!("synchronising a batch's stream: {e}")))?;
            }
        }
        let columns = (0..schema.fields().len())
            .map(|i| {
                let cols: Vec<&DeviceColumn> = parts.iter().map(|p| p.columns[i].as_ref()).collect();
                super::concat::concat_columns(gpu, stream, &cols).map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        DeviceBatch::try_new(schema, columns, rows, Arc::clone(gpu), Arc::clone(stream))
    }

    /// The batch of `columns` (indices into this one's), with `schema`, sharing their device
    /// memory and this batch's stream.
    pub fn select(&self, columns: &[usize], schema: &SchemaRef) -> Result<DeviceBatch> {
        let cols = columns
            .iter()
            .map(|&c| {
                self.columns.get(c).cloned().ok_or_else(|| {
                    gpu_error(format!("a device batch of {} columns has no column {c}", self.columns.len()))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        DeviceBatch::try_new(Arc::clone(schema), cols, self.num_rows, Arc::clone(&self.gpu), Arc::clone(&self.stream))
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn columns(&self) -> &[Arc<DeviceColumn>] {
        &self.columns
    }

    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// This batch with its consumers' work on `stream`. Only for a batch whose work is complete
    /// (a resident table's, synchronised when it was loaded): work queued on `stream` does not
    /// wait for the stream that made it.
    pub fn on_stream(self, stream: Arc<CudaStream>) -> DeviceBatch {
        DeviceBatch { stream, ..self }
    }

    /// Device bytes held by the columns.
    pub fn byte_size(&self) -> usize {
        self.columns.iter().map(|c| c.byte_size()).sum()
    }

    /// This batch on device `to` (on one of its streams): the same batch when it is there
    /// already, else a copy over the peer link ([`crate::device::peer`]). The copy is complete
    /// when this returns, so the source may be dropped at once.
    pub fn to_device(&self, to: &Arc<Gpu>) -> Result<DeviceBatch> {
        if self.gpu.same_device(to) {
            return Ok(self.clone());
        }
        self.stream.synchronize().map_err(|e| gpu_error(format!("waiting for a batch to move: {e}")))?;
        let stream = to.stream();
        let columns = self
            .columns
            .iter()
            .map(|c| copy_column(&self.gpu, c, to, &stream).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        stream.synchronize().map_err(|e| {
            gpu_error(format!("copying a batch from GPU {} to GPU {}: {e}", self.gpu.label(), to.label()))
        })?;
        DeviceBatch::try_new(Arc::clone(&self.schema), columns, self.num_rows, Arc::clone(to), stream)
    }
}

/// A copy of `col` (on device `from`, its writers finished) on device `to`, on `stream`.
fn copy_column(from: &Gpu, col: &DeviceColumn, to: &Gpu, stream: &Arc<CudaStream>) -> Result<DeviceColumn> {
    let what = "a column copied from another device";
    let copy = |b: &DeviceBuffer| crate::device::peer::copy_buffer(from, b, to, stream, what);
    Ok(DeviceColumn {
        data_type: col.data_type.clone(),
        len: col.len,
        null_count: col.null_count,
        validity: col.validity.as_ref().map(copy).transpose()?,
        buffers: col.buffers.iter().map(copy).collect::<Result<_>>()?,
        children: col.children.iter().map(|c| copy_column(from, c, to, stream)).collect::<Result<_>>()?,
    })
}

#[cfg(test)]
mod frame_tests {
    use datafusion::arrow::buffer::Buffer;

    use super::{Narrowing, offset_for, sample_of};

    fn le_bytes(values: &[i64], width: usize) -> Buffer {
        Buffer::from_vec(
            values
                .iter()
                .flat_map(|&v| match width {
                    4 => (v as i32).to_le_bytes().to_vec(),
                    8 => v.to_le_bytes().to_vec(),
                    _ => (v as i128).to_le_bytes().to_vec(),
                })
                .collect::<Vec<u8>>(),
        )
    }

    /// The frame a sample picks: 1 byte for ranges under 192, 2 bytes under 61,440 (SSB's dates
    /// fit), none past that or for a decimal past 64 bits; the sample's values all lie inside it,
    /// centred; the sample reads slices spread over a column of many parts or few large ones.
    #[test]
    fn samples_pick_frames_that_hold_them() {
        for width in [4usize, 8, 16] {
            for (values, to) in [
                ((1..=50).collect::<Vec<i64>>(), Some(1)),
                (vec![-5, 0, 11], Some(1)),
                ((0..=191).collect(), Some(1)),
                ((0..=192).collect(), Some(2)),
                (vec![19_920_101, 19_981_230, 19_950_615], Some(2)),
                (vec![0, 61_439], Some(2)),
                (vec![0, 61_440], None),
                (vec![i32::MIN as i64, i32::MAX as i64], None),
            ] {
                let buffer = le_bytes(&values, width);
                let got = offset_for(&sample_of(&[&buffer]), width);
                let (lo, hi) = (*values.iter().min().unwrap(), *values.iter().max().unwrap());
                match (got, to) {
                    (None, None) => {}
                    (Some(Narrowing::Offset { from, to: t, base }), Some(want)) => {
                        assert_eq!((from as usize, t), (width, want), "{values:?}");
                        let room = 1i64 << (8 * want);
                        assert!(base <= lo && hi < base + room, "{values:?} in {base}.. (+{room})");
                        assert!((lo - base) - (base + room - 1 - hi) <= 1, "centred: {values:?} base {base}");
                    }
                    other => panic!("{values:?} at width {width}: {other:?}, want {to:?}"),
                }
            }
        }
        let past_64 = Buffer::from_vec([1i128 << 70, 3].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        assert_eq!(offset_for(&sample_of(&[&past_64]), 16), None);
        let empty = Buffer::from_vec(Vec::<u8>::new());
        assert_eq!(offset_for(&sample_of(&[&empty]), 4), None);
        // A sample reaches past the first part's values: parts of 10 values, the last far off.
        let mut parts: Vec<Buffer> = (0..40).map(|_| le_bytes(&[7; 10], 4)).collect();
        parts.push(le_bytes(&[100_000; 10], 4));
        let refs: Vec<&Buffer> = parts.iter().collect();
        assert_eq!(offset_for(&sample_of(&refs), 4), None, "the sample saw the far part");
        let one = le_bytes(&(0..100_000).map(|i| if i < 90_000 { 5 } else { 500 }).collect::<Vec<_>>(), 8);
        assert!(
            matches!(offset_for(&sample_of(&[&one]), 8), Some(Narrowing::Offset { to: 2, .. })),
            "slices of one buffer reach its end"
        );
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::compute::concat_batches;
    use datafusion::arrow::datatypes::{Field, Schema};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testing::{all_types, assert_same_array, fresh_seed, gpu_lock, gpu_or_skip, random_array};

    /// Assembling keeps the rows of batches without columns, and refuses columns whose rows
    /// differ or that do not match the schema.
    #[test]
    fn assembly_keeps_rows_without_columns_and_refuses_ragged_columns() {
        use datafusion::arrow::array::Int32Array;
        let none = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(5)),
        )
        .unwrap();
        let Ok(HostUpload::Assembled { rows, columns, .. }) = HostUpload::assemble(&[none.clone(), none]) else {
            panic!("rows without columns are assembled")
        };
        assert_eq!((rows, columns.len()), (10, 0));
        let field = |n: &str| Field::new(n, DataType::Int32, false);
        let schema = Arc::new(Schema::new(vec![field("a"), field("b")]));
        let (three, one): (ArrayRef, ArrayRef) =
            (Arc::new(Int32Array::from(vec![1, 2, 3])), Arc::new(Int32Array::from(vec![4])));
        assert!(
            HostUpload::assemble_columns(Arc::clone(&schema), &[&[Arc::clone(&three)], &[Arc::clone(&one)]], &[])
                .is_err()
        );
        assert!(HostUpload::assemble_columns(Arc::clone(&schema), &[&[Arc::clone(&three)]], &[]).is_err());
        assert!(
            HostUpload::assemble_columns(Arc::clone(&schema), &[&[Arc::clone(&three)], &[Arc::clone(&three)]], &[])
                .is_ok()
        );
        // A column's host image goes as it is; one of other rows or type, or a list of images
        // that is not one per column, is refused.
        let image =
            crate::columns::image::column_image(&DataType::Int32, std::slice::from_ref(&three)).unwrap().unwrap();
        let columns: &[&[ArrayRef]] = &[&[Arc::clone(&three)], &[Arc::clone(&three)]];
        let Ok(HostUpload::Assembled { columns: assembled, .. }) =
            HostUpload::assemble_columns(Arc::clone(&schema), columns, &[None, Some(&image)])
        else {
            panic!("columns with an image are assembled")
        };
        assert!(assembled[0].narrowed.is_none() && assembled[1].narrowed.is_some());
        let other = crate::columns::image::column_image(&DataType::Int32, &[one]).unwrap().unwrap();
        assert!(HostUpload::assemble_columns(Arc::clone(&schema), columns, &[None, Some(&other)]).is_err());
        assert!(HostUpload::assemble_columns(schema, columns, &[Some(&image)]).is_err());
    }

    /// Every type, with and without nulls, sliced and not, empty too: host -> GPU -> host.
    #[test]
    fn gpu_roundtrip_every_type() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_roundtrip_every_type") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_roundtrip_every_type"));
        let stream = gpu.stream();
        for dt in all_types() {
            for (len, offset, nulls) in
                [(0, 0, 0.0), (0, 3, 0.5), (1, 0, 0.0), (1000, 0, 0.0), (1000, 13, 0.3), (4099, 7, 1.0)]
            {
                let full = random_array(&mut rng, &dt, len + offset, nulls);
                let array = full.slice(offset, len);
                let schema = Arc::new(Schema::new(vec![Field::new("c", dt.clone(), true)]));
                let batch = RecordBatch::try_new(schema, vec![array.clone()]).unwrap();
                let dev = DeviceBatch::upload(&gpu, &stream, &batch).unwrap();
                let back = dev.download().unwrap();
                assert_same_array(array.as_ref(), back.column(0).as_ref(), &format!("{dt} len {len} offset {offset}"));
            }
        }
    }

    /// Several host batches of every type (odd lengths, slices, nulls, empty ones) uploaded as
    /// one device batch give back their concatenation.
    #[test]
    fn gpu_upload_concat_every_type() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_upload_concat_every_type") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_upload_concat_every_type"));
        let stream = gpu.stream();
        for dt in all_types() {
            let schema = Arc::new(Schema::new(vec![Field::new("c", dt.clone(), true)]));
            let nulls = [0.0, 0.3, 1.0][rng.random_range(0..3)];
            let batches: Vec<RecordBatch> = [8192, 13, 0, 1000, 7, 4099]
                .iter()
                .map(|&len| {
                    let offset = rng.random_range(0..9);
                    let a = random_array(&mut rng, &dt, len + offset, nulls).slice(offset, len);
                    RecordBatch::try_new(Arc::clone(&schema), vec![a]).unwrap()
                })
                .collect();
            let dev = DeviceBatch::upload_concat(&gpu, &stream, &batches).unwrap();
            let back = dev.download().unwrap();
            let want = concat_batches(&schema, &batches).unwrap();
            assert_same_array(want.column(0).as_ref(), back.column(0).as_ref(), &format!("{dt} nulls {nulls}"));
        }
    }

    /// String view columns assembled from many batches cross the link as row lengths and come
    /// back equal to their concatenation: 1-byte lengths, 4-byte ones once a row passes 255
    /// bytes, inline and out-of-line values, nulls, empty batches, tens of tiles.
    #[test]
    fn gpu_strings_cross_the_link_as_lengths() {
        use datafusion::arrow::array::{ArrayRef, BinaryViewArray, StringViewArray};
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_strings_cross_the_link_as_lengths") else { return };
        let seed = fresh_seed("gpu_strings_cross_the_link_as_lengths");
        let mut rng = StdRng::seed_from_u64(seed);
        let stream = gpu.stream();
        for (binary, longest) in [(false, 1usize), (false, 40), (true, 200), (false, 700)] {
            let dt = if binary { DataType::BinaryView } else { DataType::Utf8View };
            let schema = Arc::new(Schema::new(vec![Field::new("s", dt.clone(), true)]));
            let batches: Vec<RecordBatch> = [4099usize, 0, 8192, 13, 30_000, 1]
                .iter()
                .map(|&len| {
                    let rows: Vec<Option<String>> = (0..len)
                        .map(|_| {
                            rng.random_bool(0.9).then(|| {
                                let n = rng.random_range(0..=longest);
                                (0..n).map(|_| rng.random_range(b'a'..=b'z') as char).collect()
                            })
                        })
                        .collect();
                    let a: ArrayRef = if binary {
                        Arc::new(BinaryViewArray::from_iter(rows.iter().map(|r| r.as_deref().map(str::as_bytes))))
                    } else {
                        Arc::new(StringViewArray::from_iter(rows))
                    };
                    RecordBatch::try_new(Arc::clone(&schema), vec![a]).unwrap()
                })
                .collect();
            let dev = DeviceBatch::upload_concat(&gpu, &stream, &batches).unwrap();
            let back = dev.download().unwrap();
            let want = concat_batches(&schema, &batches).unwrap();
            let ctx = format!("{dt}, rows up to {longest} bytes, seed {seed}");
            assert_same_array(want.column(0).as_ref(), back.column(0).as_ref(), &ctx);
        }
    }

    /// Many columns of random types and sizes in one batch, spanning several staging slots.
    #[test]
    fn gpu_roundtrip_wide_batch_over_many_staging_slots() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_roundtrip_wide_batch_over_many_staging_slots") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_roundtrip_wide_batch"));
        let types = all_types();
        let rows = 300_000;
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        // At least 12 columns, and enough of them to span several staging slots whatever types
        // the draw gives (narrow ones alone may not).
        let staging = gpu.transfer_settings().staging_bytes;
        let mut host_bytes = 0;
        for i in 0..64 {
            if i >= 12 && host_bytes > staging {
                break;
            }
            let dt = types[rng.random_range(0..types.len())].clone();
            let array = random_array(&mut rng, &dt, rows, 0.1);
            host_bytes += array.get_array_memory_size();
            arrays.push(array);
            fields.push(Field::new(format!("c{i}"), dt, true));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap();
        let stream = gpu.stream();
        let dev = DeviceBatch::upload(&gpu, &stream, &batch).unwrap();
        assert!(dev.byte_size() > 2 * gpu.transfer_settings().staging_bytes / 4);
        let back = dev.download().unwrap();
        for (i, (a, b)) in batch.columns().iter().zip(back.columns()).enumerate() {
            assert_same_array(a.as_ref(), b.as_ref(), &format!("column c{i} ({})", a.data_type()));
        }
    }

    /// Decimal128 values of up to 18 digits and Int64 values cross the link narrowed to 4 or 8
    /// bytes and are widened on the device: the pieces land narrowed, or as overflowing when a
    /// value needs more bits (Arrow does not hold values to their precision), and every column
    /// comes back whole through both upload paths (decimals past 32 bits through the 8-byte
    /// fallback), over several staging slots, behind a string column that leaves the slots
    /// unaligned, with a large value in a valid slot or under a NULL.
    #[test]
    fn gpu_decimals_cross_the_link_narrowed() {
        use datafusion::arrow::array::{ArrayRef, Decimal128Array, Int64Array, StringArray};
        use datafusion::arrow::buffer::NullBuffer;

        use crate::device::transfer::{Landed, Narrow, Narrowing, UploadPiece};
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_decimals_cross_the_link_narrowed") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_decimals_cross_the_link_narrowed"));
        let stream = gpu.stream();
        let rows = gpu.transfer_settings().staging_bytes / 16 * 2 + rng.random_range(1..5000);
        let values_within = |bound: i128, rng: &mut StdRng| -> Vec<i128> {
            (0..rows).map(|_| rng.random_range(-bound + 1..bound)).collect()
        };
        let decimal = |values: &[i128], nulls: Option<NullBuffer>| -> ArrayRef {
            Arc::new(Decimal128Array::new(values.to_vec().into(), nulls).with_precision_and_scale(18, 2).unwrap())
        };
        let int64 = |values: &[i128], nulls: Option<NullBuffer>| -> ArrayRef {
            Arc::new(Int64Array::new(values.iter().map(|&v| v as i64).collect::<Vec<_>>().into(), nulls))
        };
        let small = values_within(1 << 31, &mut rng);
        let mut large = values_within(10i128.pow(18), &mut rng);
        // At least one value past 32 bits, wherever the random ones fell.
        large[rng.random_range(0..rows)] = 1i128 << 40;
        let big_at = rng.random_range(0..rows);
        let mut past_64 = large.clone();
        past_64[big_at] = i128::MAX - rng.random_range(0..1000);
        let mut past_32 = small.clone();
        past_32[big_at] = i64::MIN as i128 + rng.random_range(0..1000);
        let nulls = NullBuffer::from((0..rows).map(|i| i != big_at && rng.random_bool(0.8)).collect::<Vec<bool>>());

        // Where the values buffer lands, and what the narrowed buffer holds.
        let cases = [
            (decimal(&small, None), Narrowing::I128ToI32, Landed::Narrow),
            (decimal(&large, None), Narrowing::I128ToI32, Landed::Overflow),
            (decimal(&large, None), Narrowing::I128ToI64, Landed::Narrow),
            (decimal(&past_64, None), Narrowing::I128ToI64, Landed::Overflow),
            (int64(&small, None), Narrowing::I64ToI32, Landed::Narrow),
            (int64(&past_32, None), Narrowing::I64ToI32, Landed::Overflow),
        ];
        for (array, how, want) in &cases {
            let host = array.to_data().buffers()[0].clone();
            let dst = gpu.alloc(&stream, host.len(), "test values").unwrap();
            let into = gpu.alloc(&stream, host.len() / how.shrink(), "test narrowed values").unwrap();
            let piece =
                UploadPiece { narrow: Some(Narrow { into: &into, how: *how }), ..UploadPiece::new(&host, &dst, 0) };
            assert_eq!(gpu.upload_transient(&stream, &[piece]).unwrap(), vec![*want], "{how:?}");
            if *want == Landed::Narrow {
                let low = gpu.download(&stream, &[&into]).unwrap();
                let expect: Vec<i128> = match how {
                    Narrowing::I128ToI64 => low[0].typed_data::<i64>().iter().map(|&v| v as i128).collect(),
                    _ => low[0].typed_data::<i32>().iter().map(|&v| v as i128).collect(),
                };
                let sent: Vec<i128> = match how {
                    Narrowing::I64ToI32 => host.typed_data::<i64>().iter().map(|&v| v as i128).collect(),
                    _ => host.typed_data::<i128>().to_vec(),
                };
                assert_eq!(expect, sent, "{how:?}");
            }
        }

        // Whole columns, packed and assembled from slices.
        let columns = [
            ("decimals within 32 bits", decimal(&small, None)),
            ("decimals within 64 bits", decimal(&large, None)),
            ("decimals past 64 bits", decimal(&past_64, None)),
            ("decimals large under a NULL", decimal(&past_64, Some(nulls.clone()))),
            ("Int64 within 32 bits", int64(&small, None)),
            ("Int64 past 32 bits", int64(&past_32, None)),
            ("Int64 large under a NULL", int64(&past_32, Some(nulls))),
        ];
        for (name, array) in columns {
            let text = StringArray::from_iter_values((0..rows).map(|i| "x".repeat(i % 7)));
            let schema = Arc::new(Schema::new(vec![
                Field::new("s", DataType::Utf8, false),
                Field::new("d", array.data_type().clone(), true),
            ]));
            let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(text), array]).unwrap();
            let back = DeviceBatch::upload_transient(&gpu, &stream, &batch).unwrap().download().unwrap();
            assert_same_array(batch.column(1).as_ref(), back.column(1).as_ref(), &format!("{name}, packed"));
            assert_same_array(batch.column(0).as_ref(), back.column(0).as_ref(), &format!("{name}, packed strings"));
            let cut = rng.random_range(1..rows - 1);
            let parts = [batch.slice(0, cut), batch.slice(cut, rows - cut), batch.slice(0, 4099)];
            let back = DeviceBatch::upload_concat(&gpu, &stream, &parts).unwrap().download().unwrap();
            let want = concat_batches(&schema, &parts).unwrap();
            assert_same_array(want.column(1).as_ref(), back.column(1).as_ref(), &format!("{name}, assembled"));
            assert_same_array(want.column(0).as_ref(), back.column(0).as_ref(), &format!("{name}, assembled strings"));
        }
    }

    /// Int32, Date32, Int64 and Decimal128 values in narrow ranges cross the link as their
    /// distance above a base in 1 or 2 bytes and are widened on the device: a piece lands
    /// narrowed with the frame's bytes, and whole columns come back equal through both upload
    /// paths (one packed batch, and thousands of small batches assembled), including columns whose
    /// sample misses a far value (its piece goes again at the next width) and large values under
    /// NULLs.
    #[test]
    fn gpu_narrow_ranges_cross_the_link_as_offsets() {
        use datafusion::arrow::array::{ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array};
        use datafusion::arrow::buffer::NullBuffer;

        use crate::device::transfer::{Landed, Narrow, Narrowing, UploadPiece};
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_narrow_ranges_cross_the_link_as_offsets") else { return };
        let gpu = gpu.with_config(&crate::config::GpuConfig { narrow_offsets: true, ..Default::default() }).unwrap();
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_narrow_ranges_cross_the_link_as_offsets"));
        let stream = gpu.stream();
        let rows = 3_000_000 + rng.random_range(1..5000);
        let column = |dt: &DataType, values: &[i64], nulls: Option<NullBuffer>| -> ArrayRef {
            match dt {
                DataType::Int32 => {
                    Arc::new(Int32Array::new(values.iter().map(|&v| v as i32).collect::<Vec<_>>().into(), nulls))
                }
                DataType::Date32 => {
                    Arc::new(Date32Array::new(values.iter().map(|&v| v as i32).collect::<Vec<_>>().into(), nulls))
                }
                DataType::Int64 => Arc::new(Int64Array::new(values.to_vec().into(), nulls)),
                _ => Arc::new(
                    Decimal128Array::new(values.iter().map(|&v| v as i128).collect::<Vec<_>>().into(), nulls)
                        .with_precision_and_scale(18, 2)
                        .unwrap(),
                ),
            }
        };

        // A piece narrowed by hand lands with each value's distance above the base.
        for (dt, from) in [(DataType::Int32, 4), (DataType::Int64, 8), (DataType::Decimal128(18, 2), 16)] {
            for to in [1usize, 2] {
                let base = rng.random_range(-1_000_000i64..1_000_000);
                let values: Vec<i64> = (0..rows).map(|_| base + rng.random_range(0..1i64 << (8 * to))).collect();
                let array = column(&dt, &values, None);
                let host = array.to_data().buffers()[0].clone();
                let how = Narrowing::offset(from, to, base).unwrap();
                let dst = gpu.alloc(&stream, host.len(), "test values").unwrap();
                let into = gpu.alloc(&stream, host.len() / how.shrink(), "test narrowed values").unwrap();
                let piece =
                    UploadPiece { narrow: Some(Narrow { into: &into, how }), ..UploadPiece::new(&host, &dst, 0) };
                assert_eq!(gpu.upload_transient(&stream, &[piece]).unwrap(), vec![Landed::Narrow], "{how:?}");
                let low = gpu.download(&stream, &[&into]).unwrap();
                let got: Vec<i64> = match to {
                    1 => low[0].as_slice().iter().map(|&b| b as i64 + base).collect(),
                    _ => low[0].typed_data::<u16>().iter().map(|&d| d as i64 + base).collect(),
                };
                assert_eq!(got, values, "{how:?}");
            }
        }

        // Whole columns.
        for dt in [DataType::Int32, DataType::Date32, DataType::Int64, DataType::Decimal128(18, 2)] {
            let small: Vec<i64> = (0..rows).map(|_| rng.random_range(1..=50)).collect();
            let dates: Vec<i64> = (0..rows).map(|_| 19_920_101 + rng.random_range(0..61_000)).collect();
            let mut far = small.clone();
            // Past the sampled slices' reach: the sample reads the start of each sixteenth.
            far[rows / 16 * 5 + 9000] = -2_000_000_000;
            let nulls = NullBuffer::from((0..rows).map(|i| i % 97 != 3).collect::<Vec<bool>>());
            let mut under_nulls = small.clone();
            for (i, v) in under_nulls.iter_mut().enumerate() {
                if i % 97 == 3 {
                    *v = 1_500_000_000 + i as i64;
                }
            }
            for (name, array) in [
                ("one byte", column(&dt, &small, None)),
                ("two bytes", column(&dt, &dates, None)),
                ("a far value the sample misses", column(&dt, &far, None)),
                ("large values under NULLs", column(&dt, &under_nulls, Some(nulls.clone()))),
            ] {
                let ctx = format!("{dt}, {name}");
                let schema = Arc::new(Schema::new(vec![Field::new("v", dt.clone(), true)]));
                let batch = RecordBatch::try_new(Arc::clone(&schema), vec![array]).unwrap();
                let back = DeviceBatch::upload_transient(&gpu, &stream, &batch).unwrap().download().unwrap();
                assert_same_array(batch.column(0).as_ref(), back.column(0).as_ref(), &format!("{ctx}, packed"));
                let parts: Vec<RecordBatch> =
                    (0..rows).step_by(8192).map(|a| batch.slice(a, 8192.min(rows - a))).collect();
                let back = DeviceBatch::upload_concat(&gpu, &stream, &parts).unwrap().download().unwrap();
                assert_same_array(batch.column(0).as_ref(), back.column(0).as_ref(), &format!("{ctx}, assembled"));
            }
        }
    }

    /// Bytes survive a device-to-device copy by the NVRTC-compiled kernels, tail included.
    #[test]
    fn gpu_copy_kernel_moves_every_byte() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_copy_kernel_moves_every_byte") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_copy_kernel_moves_every_byte"));
        let stream = gpu.stream();
        for len in [1usize, 15, 16, 17, 1 << 20, (3 << 20) + 5] {
            let mut bytes = vec![0u8; len];
            rng.fill(&mut bytes[..]);
            let host = Buffer::from_vec(bytes);
            let src = gpu.alloc(&stream, len, "test source").unwrap();
            let mut dst = gpu.alloc(&stream, len, "test target").unwrap();
            gpu.upload(&stream, &[UploadPiece::new(&host, &src, 0)]).unwrap();
            // Poison the target so unwritten bytes show.
            gpu.upload(&stream, &[UploadPiece::new(&Buffer::from_vec(vec![0xEEu8; len]), &dst, 0)]).unwrap();
            gpu.copy_device(&stream, &src, &mut dst, len).unwrap();
            let back = gpu.download(&stream, &[&dst]).unwrap();
            assert_eq!(back[0].as_slice(), host.as_slice(), "copy of {len} bytes");
        }
    }
}

#[cfg(test)]
mod registry_tests {
    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::device::DEFAULT_REGISTER_LIMIT;
    use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip};

    /// A buffer uploaded a second time is page-locked and then read in place; every upload,
    /// staged or direct, gives the same bytes, and lowering the limit unregisters.
    #[test]
    fn gpu_repeated_uploads_register_host_buffers() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_repeated_uploads_register_host_buffers") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_repeated_uploads_register_host_buffers"));
        let registry = gpu.host_registry();
        let before = registry.registered_bytes();
        let values: Int64Array = (0..(1 << 20)).map(|_| rng.random::<i64>()).collect::<Vec<_>>().into();
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(values) as ArrayRef]).unwrap();
        let stream = gpu.stream();
        for round in 0..4 {
            let back = DeviceBatch::upload(&gpu, &stream, &batch).unwrap().download().unwrap();
            assert_eq!(back, batch, "round {round}");
            let registered = registry.registered_bytes() - before;
            if round == 0 {
                assert_eq!(registered, 0, "a first upload is staged");
            } else {
                assert_eq!(registered, 8 << 20, "a second upload registers the 8 MiB column");
            }
        }
        registry.shrink_to(0);
        assert_eq!(registry.registered_bytes(), 0);
        // A session whose limit is 0 stages every upload, registering nothing.
        let none = gpu
            .with_config(&crate::config::GpuConfig { host_register_limit: "0".parse().unwrap(), ..Default::default() })
            .unwrap();
        for round in 0..3 {
            assert_eq!(
                DeviceBatch::upload(&none, &stream, &batch).unwrap().download().unwrap(),
                batch,
                "round {round}"
            );
        }
        assert_eq!(registry.registered_bytes(), 0);
        assert!(gpu.register_limit() == DEFAULT_REGISTER_LIMIT);
    }
}
