//! Building output columns on the device (kernels/materialize.cu).
//!
//! - GFUR (gather from untransformed relations, Wu et al. 2025): a column is gathered at row ids;
//!   NULL_ROW gives NULL (the missing side of an outer join). Every column type the device layer
//!   holds is handled: fixed width, Boolean, strings, dictionaries, with validity.
//! - GFTR (gather from transformed relations): a non-null fixed-width column that was moved
//!   through the same stable radix passes as the keys is gathered at positions in that order.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::DataType;

use crate::columns::DeviceColumn;
use crate::device::kernel::{self, Kernel};
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::bitmap_bytes;

/// Row id standing for "no row": its gathers give NULL.
pub const NULL_ROW: u32 = u32::MAX;

/// One output column to build.
pub enum GatherSpec<'a> {
    /// `col` at the row ids `rows`; `may_be_null` when `rows` may hold NULL_ROW.
    Rows { col: &'a DeviceColumn, rows: &'a DeviceBuffer, may_be_null: bool },
    /// GFTR: `values` (fixed-width, `width` bytes, no nulls, in a transformed order) at `pos`.
    Positions { data_type: DataType, values: &'a DeviceBuffer, width: usize, pos: &'a DeviceBuffer },
    /// A non-null Boolean column whose values are the bitmap `bits`.
    Bitmap(DeviceBuffer),
}

/// Whether GFUR gathers can build columns of type `dt`.
pub fn can_gather(dt: &DataType) -> bool {
    use DataType::*;
    match dt {
        Boolean | Utf8 | Binary | LargeUtf8 | LargeBinary | Utf8View | BinaryView => true,
        Dictionary(k, v) => k.is_dictionary_key_type() && crate::columns::is_supported(v),
        other => other.is_primitive() && matches!(other.primitive_width(), Some(1 | 2 | 4 | 8 | 16)),
    }
}

/// Whether a column of type `dt` can take the GFTR path (moved with the keys by the radix
/// passes, which carry 4- and 8-byte values).
pub fn can_transform(dt: &DataType) -> bool {
    dt.is_primitive() && matches!(dt.primitive_width(), Some(4 | 8))
}

fn fixed_gather_kernel(width: usize) -> Result<Kernel> {
    Ok(match width {
        1 => kernel::MAT_GATHER_W1,
        2 => kernel::MAT_GATHER_W2,
        4 => kernel::MAT_GATHER_W4,
        8 => kernel::MAT_GATHER_W8,
        16 => kernel::MAT_GATHER_W16,
        w => return Err(gpu_error(format!("no gather for {w}-byte values"))),
    })
}

/// Builds the columns of `specs`, each of `n` rows, with their null counts (one device read for
/// all of them).
pub fn gather_columns(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    specs: Vec<GatherSpec<'_>>,
    n: u64,
) -> Result<Vec<DeviceColumn>> {
    let counters = gpu.alloc_filled(stream, specs.len().max(1) * 8, 0, "null counters")?;
    let base = counters.raw_ptr(stream);
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        out.push(match spec {
            GatherSpec::Rows { col, rows, may_be_null } => {
                gather_rows(gpu, stream, col, rows, n, may_be_null, base + 8 * i as u64)?
            }
            GatherSpec::Positions { data_type, values, width, pos } => {
                let buf = gpu.alloc(stream, n as usize * width, "a joined column")?;
                // mat_gather_wX(const T* in, const u32* idx, T* out, u64 n)
                gpu.launch_n(
                    stream,
                    fixed_gather_kernel(width)?,
                    n,
                    &[ptr(values, stream), ptr(pos, stream), ptr(&buf, stream), KArg::U64(n)],
                )?;
                DeviceColumn {
                    data_type,
                    len: n as usize,
                    null_count: 0,
                    validity: None,
                    buffers: vec![buf],
                    children: vec![],
                }
            }
            GatherSpec::Bitmap(bits) => DeviceColumn {
                data_type: DataType::Boolean,
                len: n as usize,
                null_count: 0,
                validity: None,
                buffers: vec![bits],
                children: vec![],
            },
        });
    }
    let nulls = gpu.read::<u64>(stream, &counters, 0, out.len())?;
    for (col, nulls) in out.iter_mut().zip(nulls) {
        if col.validity.is_some() {
            col.null_count = nulls as usize;
            if nulls == 0 {
                col.validity = None;
            }
        }
    }
    Ok(out)
}

/// GFUR gather of one column; its validity's unset bits are added to the u64 at `null_counter`.
fn gather_rows(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    col: &DeviceColumn,
    rows: &DeviceBuffer,
    n: u64,
    may_be_null: bool,
    null_counter: u64,
) -> Result<DeviceColumn> {
    let what = "a joined column";
    let validity = if col.validity.is_some() || may_be_null {
        let bits = gpu.alloc(stream, bitmap_bytes(n), what)?;
        gather_bits(gpu, stream, col.validity.as_ref(), rows, n, &bits, null_counter)?;
        Some(bits)
    } else {
        None
    };
    let buf =
        |i: usize| col.buffers.get(i).ok_or_else(|| gpu_error(format!("a {} column lacks buffer {i}", col.data_type)));
    let (buffers, children) = match &col.data_type {
        DataType::Boolean => {
            let bits = gpu.alloc(stream, bitmap_bytes(n), what)?;
            gather_bits(gpu, stream, Some(buf(0)?), rows, n, &bits, 0)?;
            (vec![bits], vec![])
        }
        DataType::Utf8 | DataType::Binary => (gather_strings(gpu, stream, buf(0)?, buf(1)?, rows, n, 4)?, vec![]),
        DataType::LargeUtf8 | DataType::LargeBinary | DataType::Utf8View | DataType::BinaryView => {
            (gather_strings(gpu, stream, buf(0)?, buf(1)?, rows, n, 8)?, vec![])
        }
        DataType::Dictionary(k, _) => {
            let width = k.primitive_width().ok_or_else(|| gpu_error(format!("dictionary key type {k}")))?;
            let keys = gather_fixed(gpu, stream, buf(0)?, rows, n, width)?;
            let child = col.children.first().ok_or_else(|| gpu_error("a dictionary column without values"))?;
            (vec![keys], vec![clone_column(gpu, stream, child)?])
        }
        other => {
            let width = other.primitive_width().ok_or_else(|| gpu_error(format!("no gather for {other}")))?;
            (vec![gather_fixed(gpu, stream, buf(0)?, rows, n, width)?], vec![])
        }
    };
    Ok(DeviceColumn { data_type: col.data_type.clone(), len: n as usize, null_count: 0, validity, buffers, children })
}

fn gather_fixed(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    values: &DeviceBuffer,
    rows: &DeviceBuffer,
    n: u64,
    width: usize,
) -> Result<DeviceBuffer> {
    let out = gpu.alloc(stream, n as usize * width, "a joined column")?;
    // mat_gather_wX(const T* in, const u32* idx, T* out, u64 n)
    gpu.launch_n(
        stream,
        fixed_gather_kernel(width)?,
        n,
        &[ptr(values, stream), ptr(rows, stream), ptr(&out, stream), KArg::U64(n)],
    )?;
    Ok(out)
}

/// Bit i of `out` = rows[i] is a row and bit rows[i] of `bits` (when given) is set.
fn gather_bits(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    bits: Option<&DeviceBuffer>,
    rows: &DeviceBuffer,
    n: u64,
    out: &DeviceBuffer,
    zeros_counter: u64,
) -> Result<()> {
    // mat_gather_bits(const u8* bits, const u32* idx, u64 n, u32* out, u64* zeros)
    gpu.launch_n(
        stream,
        kernel::MAT_GATHER_BITS,
        n.div_ceil(32) * 32,
        &[opt_ptr(bits, stream), ptr(rows, stream), KArg::U64(n), ptr(out, stream), KArg::U64(zeros_counter)],
    )
}

/// Gathers strings with `ow`-byte offsets: lengths, their scan, then a warp per string copies it.
fn gather_strings(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    offsets: &DeviceBuffer,
    bytes: &DeviceBuffer,
    rows: &DeviceBuffer,
    n: u64,
    ow: usize,
) -> Result<Vec<DeviceBuffer>> {
    let (lengths, copy) = if ow == 4 {
        (kernel::MAT_STR_LENGTHS32, kernel::MAT_STR_COPY32)
    } else {
        (kernel::MAT_STR_LENGTHS64, kernel::MAT_STR_COPY64)
    };
    let out_offsets = gpu.alloc(stream, (n as usize + 1) * ow, "a joined string column")?;
    if n == 0 {
        gpu.fill_bytes(stream, &out_offsets, 0)?;
        return Ok(vec![out_offsets, gpu.alloc(stream, 0, "a joined string column")?]);
    }
    let lens = gpu.alloc(stream, n as usize * 4, "string lengths")?;
    // mat_str_lengthsXX(const O* offsets, const u32* idx, u64 n, u32* lens)
    gpu.launch_n(stream, lengths, n, &[ptr(offsets, stream), ptr(rows, stream), KArg::U64(n), ptr(&lens, stream)])?;
    let (starts, total) = exclusive_scan(gpu, stream, &lens, n, ScanKind::U32ToU64, true)?;
    let total = gpu.read::<u64>(stream, &total.ok_or_else(|| gpu_error("scan returned no total"))?, 0, 1)?[0];
    if ow == 4 && total > i32::MAX as u64 {
        return Err(gpu_error(format!(
            "a joined string column of {n} rows holds {total} bytes, more than the 2 GiB that 32-bit \
             offsets address; lower gpu.batch_rows"
        )));
    }
    let out_bytes = gpu.alloc(stream, total as usize, "a joined string column")?;
    // mat_str_copyXX(in_offsets, in_bytes, idx, starts, n, total, out_offsets, out_bytes): a warp per row
    gpu.launch_n(
        stream,
        copy,
        n * 32,
        &[
            ptr(offsets, stream),
            ptr(bytes, stream),
            ptr(rows, stream),
            ptr(&starts, stream),
            KArg::U64(n),
            KArg::U64(total),
            ptr(&out_offsets, stream),
            ptr(&out_bytes, stream),
        ],
    )?;
    Ok(vec![out_offsets, out_bytes])
}

/// A device copy of `col`.
pub fn clone_column(gpu: &Gpu, stream: &Arc<CudaStream>, col: &DeviceColumn) -> Result<DeviceColumn> {
    let copy = |b: &DeviceBuffer| gpu.clone_buffer(stream, b, "a copied column");
    Ok(DeviceColumn {
        data_type: col.data_type.clone(),
        len: col.len,
        null_count: col.null_count,
        validity: col.validity.as_ref().map(copy).transpose()?,
        buffers: col.buffers.iter().map(copy).collect::<Result<_>>()?,
        children: col.children.iter().map(|c| clone_column(gpu, stream, c)).collect::<Result<_>>()?,
    })
}

/// The values of a dictionary column, one per row (NULL where the key or its value is null).
pub fn decode_dictionary(gpu: &Gpu, stream: &Arc<CudaStream>, col: &DeviceColumn) -> Result<DeviceColumn> {
    let DataType::Dictionary(k, _) = &col.data_type else {
        return Err(gpu_error(format!("decoding a {} column as a dictionary", col.data_type)));
    };
    let width = k.primitive_width().ok_or_else(|| gpu_error(format!("dictionary key type {k}")))?;
    let kernel = match width {
        1 => kernel::MAT_DICT_ROWS_W1,
        2 => kernel::MAT_DICT_ROWS_W2,
        4 => kernel::MAT_DICT_ROWS_W4,
        8 => kernel::MAT_DICT_ROWS_W8,
        w => return Err(gpu_error(format!("dictionary keys of {w} bytes"))),
    };
    let n = col.len as u64;
    let keys = col.buffers.first().ok_or_else(|| gpu_error("a dictionary column without keys"))?;
    let values = col.children.first().ok_or_else(|| gpu_error("a dictionary column without values"))?;
    let rows = gpu.alloc(stream, n as usize * 4, "dictionary rows")?;
    // mat_dict_rows_wX(const T* keys, const u8* validity, u64 n, u32* rows)
    gpu.launch_n(
        stream,
        kernel,
        n,
        &[ptr(keys, stream), opt_ptr(col.validity.as_ref(), stream), KArg::U64(n), ptr(&rows, stream)],
    )?;
    let mut out =
        gather_columns(gpu, stream, vec![GatherSpec::Rows { col: values, rows: &rows, may_be_null: true }], n)?;
    out.pop().ok_or_else(|| gpu_error("decoding a dictionary produced no column"))
}

/// A column of `n` NULLs of type `dt` (the missing side of an outer join's unmatched rows).
pub fn null_column(gpu: &Gpu, stream: &Arc<CudaStream>, dt: &DataType, n: u64) -> Result<DeviceColumn> {
    let zeros = |len: usize| gpu.alloc_filled(stream, len, 0, "a column of NULLs");
    let (buffers, children) = match dt {
        DataType::Boolean => (vec![zeros(bitmap_bytes(n))?], vec![]),
        DataType::Utf8 | DataType::Binary => (vec![zeros((n as usize + 1) * 4)?, zeros(0)?], vec![]),
        DataType::LargeUtf8 | DataType::LargeBinary | DataType::Utf8View | DataType::BinaryView => {
            (vec![zeros((n as usize + 1) * 8)?, zeros(0)?], vec![])
        }
        // Every key is null; one NULL value keeps key 0 in bounds for Arrow's checks.
        DataType::Dictionary(k, v) => {
            let width = k.primitive_width().ok_or_else(|| gpu_error(format!("dictionary key type {k}")))?;
            (vec![zeros(n as usize * width)?], vec![null_column(gpu, stream, v, 1)?])
        }
        other => {
            let width = other.primitive_width().ok_or_else(|| gpu_error(format!("no NULL column of type {other}")))?;
            (vec![zeros(n as usize * width)?], vec![])
        }
    };
    Ok(DeviceColumn {
        data_type: dt.clone(),
        len: n as usize,
        null_count: n as usize,
        validity: Some(zeros(bitmap_bytes(n))?),
        buffers,
        children,
    })
}
