//! Concatenating columns on the device.
//!
//! [`upload_row_ranges`] joins row ranges of host columns into device columns, as the out-of-core
//! join restores a partition from the chunks it was spilled in: fixed-width values and string
//! bytes by DMA copies at their offsets, validity and Boolean bitmaps bit by bit (ranges need not
//! start or end on a byte), and string offsets moved behind the bytes of the ranges before them.
//! Dictionaries are not handled: their pieces may hold different dictionaries.
//!
//! [`concat_columns`] joins whole device columns the same way without leaving the device (as a
//! GPU aggregate merges the states of its chunks and partitions), Lists included (their offsets
//! moved behind the child rows before them, the children concatenated in turn). It relies on the
//! device layout's invariant that string and List offsets start at 0 and end at the length of
//! their byte buffer or child, as packing and every kernel that makes such columns write them.
//! Dictionary columns go through the host.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::buffer::{BooleanBuffer, Buffer};
use datafusion::arrow::datatypes::DataType;

use super::bitmap_bytes;
use super::{DeviceColumn, HostColumn, download_columns, pack, unpack, upload_columns};
use crate::device::kernel;
use crate::device::transfer::UploadPiece;
use crate::device::{DeviceBuffer, Gpu, KArg, ptr};
use crate::error::{Result, gpu_error};

/// Whether [`upload_row_ranges`] handles columns of type `dt`.
pub fn can_concat(dt: &DataType) -> bool {
    !matches!(dt, DataType::Dictionary(..)) && crate::columns::is_supported(dt)
}

/// Offset width in bytes of a string or binary type as stored on the device, or `None`.
pub fn offset_width(dt: &DataType) -> Option<usize> {
    use DataType::*;
    match dt {
        Utf8 | Binary => Some(4),
        LargeUtf8 | LargeBinary | Utf8View | BinaryView => Some(8),
        _ => None,
    }
}

/// Nulls among rows `rows` of `col`.
fn nulls_in(col: &HostColumn, rows: &Range<usize>) -> usize {
    match &col.validity {
        Some(v) if col.null_count > 0 => {
            rows.len() - BooleanBuffer::new(v.clone(), rows.start, rows.len()).count_set_bits()
        }
        _ => 0,
    }
}

/// Host offsets of a string column as i64, checked to cover `rows`.
fn host_offset(col: &HostColumn, ow: usize, row: usize) -> Result<i64> {
    let off =
        col.buffers.first().ok_or_else(|| gpu_error(format!("a {} host column without offsets", col.data_type)))?;
    let at = row * ow;
    let bytes = off
        .get(at..at + ow)
        .ok_or_else(|| gpu_error(format!("offset {row} of a {} host column of {} rows", col.data_type, col.len)))?;
    Ok(match ow {
        4 => i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64,
        _ => i64::from_le_bytes(bytes.try_into().map_err(|_| gpu_error("an 8-byte offset of another size"))?),
    })
}

/// Device bytes rows `rows` of `col` take (its buffers' share of them).
pub fn host_range_bytes(col: &HostColumn, rows: &Range<usize>) -> u64 {
    let n = rows.len() as u64;
    let validity = if col.validity.is_some() { n.div_ceil(8) } else { 0 };
    let data = if col.data_type == DataType::Boolean {
        n.div_ceil(8)
    } else if let Some(ow) = offset_width(&col.data_type) {
        let values = match (host_offset(col, ow, rows.start), host_offset(col, ow, rows.end)) {
            (Ok(a), Ok(b)) => (b - a).max(0) as u64,
            _ => 0,
        };
        (n + 1) * ow as u64 + values
    } else {
        n * col.data_type.primitive_width().unwrap_or(8) as u64
    };
    validity + data
}

/// One device column holding rows `range` of each host column of `parts` in order (same type,
/// none a dictionary or nested). Bytes go up in one upload (straight from pinned memory where they
/// lie in the pool); bitmaps, whose ranges need not start on a byte, and string offsets, which
/// move behind the bytes before them, are placed by kernels from their uploaded byte ranges.
pub fn upload_row_ranges(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    parts: &[(&HostColumn, Range<usize>)],
) -> Result<DeviceColumn> {
    let first = parts.first().ok_or_else(|| gpu_error("concatenating no host columns"))?.0;
    let dt = first.data_type.clone();
    for (c, r) in parts {
        if c.data_type != dt {
            return Err(gpu_error(format!("concatenating a {} host column with a {} column", c.data_type, dt)));
        }
        if r.end > c.len || r.start > r.end {
            return Err(gpu_error(format!("rows {r:?} of a host column of {} rows", c.len)));
        }
    }
    if !can_concat(&dt) || !first.children.is_empty() {
        return Err(gpu_error(format!("device concatenation of {dt} columns is not supported")));
    }
    let len: usize = parts.iter().map(|(_, r)| r.len()).sum();
    let null_count: usize = parts.iter().map(|(c, r)| nulls_in(c, r)).sum();
    let parts: Vec<&(&HostColumn, Range<usize>)> = parts.iter().filter(|(_, r)| !r.is_empty()).collect();
    // Byte ranges of each part's bitmap (`buffer` None: its validity) holding its rows.
    let bitmap_slice = |c: &HostColumn, r: &Range<usize>, buffer: Option<usize>| -> Result<Option<Buffer>> {
        let bits = match buffer {
            None => match &c.validity {
                Some(v) if c.null_count > 0 => v,
                _ => return Ok(None),
            },
            Some(i) => c.buffers.get(i).ok_or_else(|| gpu_error(format!("a {dt} host column without buffer {i}")))?,
        };
        let (a, b) = (r.start / 8, r.end.div_ceil(8));
        if b > bits.len() {
            return Err(gpu_error(format!("a bitmap of {} bytes for rows {r:?}", bits.len())));
        }
        Ok(Some(bits.slice_with_length(a, b - a)))
    };
    // Host byte ranges to upload: (bytes, index into `dests`, byte offset there).
    let mut host: Vec<(Buffer, usize, usize)> = Vec::new();
    let mut dests: Vec<DeviceBuffer> = Vec::new();
    // Per string part: its uploaded offsets, and how far they move.
    let mut temps: Vec<(usize, i64)> = Vec::new();
    // Validity (and Boolean values): each part's byte range uploaded to a temporary (none: all
    // set), then its bits placed by kernel.
    let mut bitmap_sources = Vec::new();
    if null_count > 0 {
        bitmap_sources.push(None);
    }
    if dt == DataType::Boolean {
        bitmap_sources.push(Some(0));
    }
    let mut bitmap_temps: Vec<Vec<Option<usize>>> = Vec::new();
    for buffer in bitmap_sources {
        let mut idx = Vec::with_capacity(parts.len());
        for (c, r) in &parts {
            idx.push(match bitmap_slice(c, r, buffer)? {
                Some(b) => {
                    dests.push(gpu.alloc(stream, b.len(), "a spilled bitmap range")?);
                    host.push((b, dests.len() - 1, 0));
                    Some(dests.len() - 1)
                }
                None => None,
            });
        }
        bitmap_temps.push(idx);
    }
    let ow = offset_width(&dt);
    let data = if dt == DataType::Boolean {
        None
    } else if let Some(ow) = ow {
        // Offsets ranges go to temporaries, values straight behind each other.
        let mut at = 0usize;
        // Per part: its first offset, its value bytes, and where they go.
        let mut starts = Vec::with_capacity(parts.len());
        for (c, r) in &parts {
            let (a, b) = (host_offset(c, ow, r.start)?, host_offset(c, ow, r.end)?);
            let n = (b - a).max(0) as usize;
            starts.push((a, n, at));
            at += n;
        }
        let value_bytes = at;
        if ow == 4 && value_bytes > i32::MAX as usize {
            return Err(gpu_error(format!(
                "concatenated {dt} values hold {value_bytes} bytes, more than 32-bit offsets address"
            )));
        }
        dests.push(gpu.alloc(stream, (len + 1) * ow, "concatenated string offsets")?);
        let offsets = dests.len() - 1;
        dests.push(gpu.alloc(stream, value_bytes, "concatenated string bytes")?);
        let values = dests.len() - 1;
        for ((c, r), &(a, n, at)) in parts.iter().zip(&starts) {
            let off = &c.buffers[0];
            dests.push(gpu.alloc(stream, (r.len() + 1) * ow, "a spilled offsets range")?);
            host.push((off.slice_with_length(r.start * ow, (r.len() + 1) * ow), dests.len() - 1, 0));
            temps.push((dests.len() - 1, at as i64 - a));
            let vals = c.buffers.get(1).ok_or_else(|| gpu_error(format!("a {dt} host column without values")))?;
            if a as usize + n > vals.len() {
                return Err(gpu_error(format!("string offsets past the {} value bytes of a host column", vals.len())));
            }
            host.push((vals.slice_with_length(a as usize, n), values, at));
        }
        Some((offsets, Some(values)))
    } else {
        let width = dt.primitive_width().ok_or_else(|| gpu_error(format!("no device concatenation for {dt}")))?;
        dests.push(gpu.alloc(stream, len * width, "a concatenated column")?);
        let out = dests.len() - 1;
        let mut at = 0usize;
        for (c, r) in &parts {
            let b = c.buffers.first().ok_or_else(|| gpu_error(format!("a {dt} host column without values")))?;
            if r.end * width > b.len() {
                return Err(gpu_error(format!("rows {r:?} past the {} bytes of a {dt} host column", b.len())));
            }
            host.push((b.slice_with_length(r.start * width, r.len() * width), out, at));
            at += r.len() * width;
        }
        Some((out, None))
    };
    let pieces: Vec<UploadPiece<'_>> =
        host.iter().filter(|(b, _, _)| !b.is_empty()).map(|(b, d, at)| UploadPiece::new(b, &dests[*d], *at)).collect();
    gpu.upload(stream, &pieces)?;
    // Bitmaps: each part's bits behind those of the parts before.
    let mut bitmap_out = Vec::with_capacity(bitmap_temps.len());
    for idx in &bitmap_temps {
        let out = gpu.alloc_filled(stream, bitmap_bytes(len as u64), 0, "a concatenated bitmap")?;
        let mut at = 0u64;
        for ((_, r), t) in parts.iter().zip(idx) {
            // concat_bits(const u8* src, u64 first, u64 n, u64 at, u32* dst)
            gpu.launch_n(
                stream,
                kernel::CONCAT_BITS,
                r.len() as u64,
                &[
                    KArg::U64(t.map_or(0, |t| dests[t].raw_ptr(stream))),
                    KArg::U64((r.start % 8) as u64),
                    KArg::U64(r.len() as u64),
                    KArg::U64(at),
                    ptr(&out, stream),
                ],
            )?;
            at += r.len() as u64;
        }
        bitmap_out.push(out);
    }
    // String offsets: each part's moved behind the value bytes before it.
    if let (Some(ow), Some((offsets, _))) = (ow, data) {
        let kernel = if ow == 4 { kernel::CONCAT_OFFSETS_I32 } else { kernel::CONCAT_OFFSETS_I64 };
        let mut row = 0usize;
        for ((_, r), &(t, delta)) in parts.iter().zip(&temps) {
            // concat_offsets_iXX(const O* src, u64 n, i64 delta, O* dst)
            let dst = dests[offsets].raw_ptr(stream) + (row * ow) as u64;
            gpu.launch_n(
                stream,
                kernel,
                r.len() as u64 + 1,
                &[ptr(&dests[t], stream), KArg::U64(r.len() as u64 + 1), KArg::U64(delta as u64), KArg::U64(dst)],
            )?;
            row += r.len();
        }
        if parts.is_empty() {
            gpu.fill_bytes(stream, &dests[offsets], 0)?;
        }
    }
    // Move the results out of `dests` (temporaries are dropped, stream-ordered).
    let mut dests: Vec<Option<DeviceBuffer>> = dests.into_iter().map(Some).collect();
    let mut take = |i: usize| dests[i].take().ok_or_else(|| gpu_error("a concatenated buffer taken twice"));
    let mut bitmap_out = bitmap_out.into_iter();
    let validity = if null_count > 0 { bitmap_out.next() } else { None };
    let buffers = match data {
        None => vec![bitmap_out.next().ok_or_else(|| gpu_error("a Boolean column without its bitmap"))?],
        Some((out, None)) => vec![take(out)?],
        Some((offsets, Some(values))) => vec![take(offsets)?, take(values)?],
    };
    Ok(DeviceColumn { data_type: dt, len, null_count, validity, buffers, children: vec![] })
}

/// Whether [`concat_columns`] joins columns of type `dt` on the device (else through the host).
fn concat_on_device(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(..) => false,
        DataType::List(item) => concat_on_device(item.data_type()),
        other => crate::columns::is_supported(other),
    }
}

/// A bitmap of every part's bits behind those of the parts before (`None`: all bits set).
fn concat_bitmaps(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    parts: &[(Option<&DeviceBuffer>, usize)],
    len: usize,
) -> Result<DeviceBuffer> {
    let out = gpu.alloc_filled(stream, bitmap_bytes(len as u64), 0, "a concatenated bitmap")?;
    let mut at = 0u64;
    for &(bits, n) in parts {
        if let Some(b) = bits.filter(|b| b.len() < n.div_ceil(8)) {
            return Err(gpu_error(format!("a bitmap of {} bytes for {n} rows", b.len())));
        }
        if n > 0 {
            // concat_bits(const u8* src, u64 first, u64 n, u64 at, u32* dst)
            gpu.launch_n(
                stream,
                kernel::CONCAT_BITS,
                n as u64,
                &[
                    KArg::U64(bits.map_or(0, |b| b.raw_ptr(stream))),
                    KArg::U64(0),
                    KArg::U64(n as u64),
                    KArg::U64(at),
                    ptr(&out, stream),
                ],
            )?;
        }
        at += n as u64;
    }
    Ok(out)
}

/// Offsets of `len` rows made of each part's `rows + 1` offsets moved by `deltas` (`ow` bytes each).
fn concat_offsets(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    parts: &[(&DeviceBuffer, usize)],
    deltas: &[i64],
    len: usize,
    ow: usize,
) -> Result<DeviceBuffer> {
    let out = gpu.alloc(stream, (len + 1) * ow, "concatenated offsets")?;
    let kernel = if ow == 4 { kernel::CONCAT_OFFSETS_I32 } else { kernel::CONCAT_OFFSETS_I64 };
    let mut row = 0usize;
    // In order on one stream: a part's first offset overwrites the last one of the part before,
    // which is the same value by the layout's invariant.
    for (&(offsets, n), &delta) in parts.iter().zip(deltas) {
        if offsets.len() < (n + 1) * ow {
            return Err(gpu_error(format!("{} bytes of offsets for {n} rows", offsets.len())));
        }
        // concat_offsets_iXX(const O* src, u64 n, i64 delta, O* dst)
        gpu.launch_n(
            stream,
            kernel,
            n as u64 + 1,
            &[
                ptr(offsets, stream),
                KArg::U64(n as u64 + 1),
                KArg::U64(delta as u64),
                KArg::U64(out.raw_ptr(stream) + (row * ow) as u64),
            ],
        )?;
        row += n;
    }
    Ok(out)
}

/// One device column holding every row of `parts` in order (whole columns of one type), built
/// on `stream` (the parts' own work must be complete or ordered before it). Dictionaries go
/// through the host (arrow's concatenation), everything else stays on the device.
pub fn concat_columns(gpu: &Gpu, stream: &Arc<CudaStream>, parts: &[&DeviceColumn]) -> Result<DeviceColumn> {
    let first = parts.first().ok_or_else(|| gpu_error("concatenating no device columns"))?;
    let dt = first.data_type.clone();
    if let Some(p) = parts.iter().find(|p| p.data_type != dt) {
        return Err(gpu_error(format!("concatenating a {} device column with a {dt} column", p.data_type)));
    }
    if !concat_on_device(&dt) {
        let hosts = download_columns(gpu, stream, parts)?;
        let arrays = hosts.into_iter().map(unpack).collect::<datafusion::error::Result<Vec<_>>>()?;
        let refs: Vec<&dyn datafusion::arrow::array::Array> = arrays.iter().map(|a| a.as_ref()).collect();
        let joined = datafusion::arrow::compute::concat(&refs)?;
        return upload_columns(gpu, stream, &[pack(joined.as_ref())?])?
            .pop()
            .ok_or_else(|| gpu_error("an upload returned no column"));
    }
    let len: usize = parts.iter().map(|p| p.len).sum();
    let null_count: usize = parts.iter().map(|p| p.null_count).sum();
    let validity = if null_count > 0 {
        let bits: Vec<_> =
            parts.iter().map(|p| (if p.null_count > 0 { p.validity.as_ref() } else { None }, p.len)).collect();
        if let Some(p) = parts.iter().find(|p| p.null_count > 0 && p.validity.is_none()) {
            return Err(gpu_error(format!("a {dt} device column with {} nulls and no validity", p.null_count)));
        }
        Some(concat_bitmaps(gpu, stream, &bits, len)?)
    } else {
        None
    };
    fn buffer(p: &DeviceColumn, i: usize) -> Result<&DeviceBuffer> {
        p.buffers.get(i).ok_or_else(|| gpu_error(format!("a {} device column without buffer {i}", p.data_type)))
    }
    let (buffers, children) = if dt == DataType::Boolean {
        let bits = parts.iter().map(|p| Ok((Some(buffer(p, 0)?), p.len))).collect::<Result<Vec<_>>>()?;
        (vec![concat_bitmaps(gpu, stream, &bits, len)?], vec![])
    } else if let Some(ow) = offset_width(&dt) {
        let mut deltas = Vec::with_capacity(parts.len());
        let mut at = 0usize;
        for p in parts {
            deltas.push(at as i64);
            at += buffer(p, 1)?.len();
        }
        if ow == 4 && at > i32::MAX as usize {
            return Err(gpu_error(format!(
                "concatenated {dt} values hold {at} bytes, more than 32-bit offsets address; lower gpu.batch_rows"
            )));
        }
        let mut values = gpu.alloc(stream, at, "concatenated string bytes")?;
        for (p, &d) in parts.iter().zip(&deltas) {
            let b = buffer(p, 1)?;
            gpu.copy_device_at(stream, b, &mut values, d as usize, b.len())?;
        }
        let offsets = parts.iter().map(|p| Ok((buffer(p, 0)?, p.len))).collect::<Result<Vec<_>>>()?;
        (vec![concat_offsets(gpu, stream, &offsets, &deltas, len, ow)?, values], vec![])
    } else if let DataType::List(_) = &dt {
        let items: Vec<&DeviceColumn> = parts
            .iter()
            .map(|p| p.children.first().ok_or_else(|| gpu_error(format!("a {dt} device column without values"))))
            .collect::<Result<_>>()?;
        let mut deltas = Vec::with_capacity(parts.len());
        let mut at = 0usize;
        for c in &items {
            deltas.push(at as i64);
            at += c.len;
        }
        if at > i32::MAX as usize {
            return Err(gpu_error(format!("concatenated lists hold {at} values, more than 32-bit offsets address")));
        }
        let offsets = parts.iter().map(|p| Ok((buffer(p, 0)?, p.len))).collect::<Result<Vec<_>>>()?;
        let offsets = concat_offsets(gpu, stream, &offsets, &deltas, len, 4)?;
        (vec![offsets], vec![concat_columns(gpu, stream, &items)?])
    } else {
        let width = dt.primitive_width().ok_or_else(|| gpu_error(format!("no device concatenation for {dt}")))?;
        let mut out = gpu.alloc(stream, len * width, "a concatenated column")?;
        let mut at = 0usize;
        for p in parts {
            gpu.copy_device_at(stream, buffer(p, 0)?, &mut out, at, p.len * width)?;
            at += p.len * width;
        }
        (vec![out], vec![])
    };
    Ok(DeviceColumn { data_type: dt, len, null_count, validity, buffers, children })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, ArrayRef};
    use datafusion::arrow::compute::concat;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip, random_array};

    /// Random row ranges of several host columns of each type, with and without nulls, come out
    /// of the device as Arrow's concatenation of the same slices; also from pinned host memory.
    #[test]
    fn gpu_row_ranges_concatenate_like_arrow() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_row_ranges_concatenate_like_arrow") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_row_ranges_concatenate_like_arrow"));
        let stream = gpu.stream();
        let types = [
            DataType::Int32,
            DataType::Int64,
            DataType::Boolean,
            DataType::Utf8,
            DataType::LargeUtf8,
            DataType::Utf8View,
            DataType::Decimal128(20, 3),
            DataType::Date32,
        ];
        for dt in &types {
            for nulls in [0.0, 0.3] {
                for pinned in [false, true] {
                    let arrays: Vec<ArrayRef> = (0..4)
                        .map(|_| {
                            let n = rng.random_range(0..3000);
                            random_array(&mut rng, dt, n, nulls)
                        })
                        .collect();
                    let mut hosts: Vec<HostColumn> = arrays.iter().map(|a| pack(a.as_ref()).unwrap()).collect();
                    if pinned {
                        // Through the device and back: the buffers then lie in the pinned pool.
                        hosts = hosts
                            .iter()
                            .map(|h| {
                                let d = crate::columns::upload_columns(&gpu, &stream, std::slice::from_ref(h)).unwrap();
                                crate::columns::download_columns(&gpu, &stream, &[&d[0]]).unwrap().remove(0)
                            })
                            .collect();
                    }
                    let ranges: Vec<Range<usize>> = arrays
                        .iter()
                        .map(|a| {
                            let x = rng.random_range(0..=a.len());
                            let y = rng.random_range(0..=a.len());
                            x.min(y)..x.max(y)
                        })
                        .collect();
                    let parts: Vec<(&HostColumn, Range<usize>)> =
                        hosts.iter().zip(&ranges).map(|(h, r)| (h, r.clone())).collect();
                    let dev = upload_row_ranges(&gpu, &stream, &parts).unwrap();
                    let bytes: u64 = parts.iter().map(|(h, r)| host_range_bytes(h, r)).sum();
                    assert!(
                        bytes >= dev.byte_size() as u64 / 2,
                        "{dt}: {bytes} bytes estimated for {}",
                        dev.byte_size()
                    );
                    let got =
                        unpack(crate::columns::download_columns(&gpu, &stream, &[&dev]).unwrap().remove(0)).unwrap();
                    let slices: Vec<ArrayRef> =
                        arrays.iter().zip(&ranges).map(|(a, r)| a.slice(r.start, r.len())).collect();
                    let refs: Vec<&dyn Array> = slices.iter().map(|a| a.as_ref()).collect();
                    let want = concat(&refs).unwrap();
                    assert_eq!(
                        got.to_data(),
                        want.to_data(),
                        "{dt}, nulls {nulls}, pinned {pinned}, ranges {ranges:?}"
                    );
                    assert_eq!(got.null_count(), want.null_count());
                }
            }
        }
    }

    /// Whole device columns of every kind the aggregate's states hold (Lists and dictionaries
    /// too), empty ones among them, concatenate on the device as Arrow concatenates them.
    #[test]
    fn gpu_device_columns_concatenate_like_arrow() {
        use datafusion::arrow::array::ListArray;
        use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
        use datafusion::arrow::datatypes::Field;
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_device_columns_concatenate_like_arrow") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_device_columns_concatenate_like_arrow"));
        let stream = gpu.stream();
        let item = Arc::new(Field::new("item", DataType::Int64, true));
        let types = [
            DataType::Int8,
            DataType::Int64,
            DataType::Boolean,
            DataType::Utf8,
            DataType::LargeUtf8,
            DataType::Utf8View,
            DataType::Decimal128(38, 10),
            DataType::Date32,
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            DataType::List(Arc::clone(&item)),
        ];
        for dt in &types {
            for nulls in [0.0, 0.3] {
                for parts in [1usize, 2, 5] {
                    let arrays: Vec<ArrayRef> = (0..parts)
                        .map(|_| {
                            let n = if rng.random_bool(0.2) { 0 } else { rng.random_range(1..3000) };
                            match dt {
                                DataType::List(_) => {
                                    let lengths: Vec<usize> = (0..n).map(|_| rng.random_range(0..4)).collect();
                                    let values = random_array(&mut rng, &DataType::Int64, lengths.iter().sum(), 0.1);
                                    let valid: Vec<bool> = (0..n).map(|_| !rng.random_bool(nulls)).collect();
                                    let list = ListArray::new(
                                        Arc::clone(&item),
                                        OffsetBuffer::from_lengths(lengths),
                                        values,
                                        (nulls > 0.0).then(|| NullBuffer::from(valid)),
                                    );
                                    Arc::new(list) as ArrayRef
                                }
                                DataType::Dictionary(..) => {
                                    let v = random_array(&mut rng, &DataType::Utf8, n, nulls);
                                    datafusion::arrow::compute::cast(&v, dt).unwrap()
                                }
                                _ => random_array(&mut rng, dt, n, nulls),
                            }
                        })
                        .collect();
                    let hosts: Vec<HostColumn> = arrays.iter().map(|a| pack(a.as_ref()).unwrap()).collect();
                    let devs = upload_columns(&gpu, &stream, &hosts).unwrap();
                    let refs: Vec<&DeviceColumn> = devs.iter().collect();
                    let joined = concat_columns(&gpu, &stream, &refs).unwrap();
                    assert_eq!(joined.len, arrays.iter().map(|a| a.len()).sum::<usize>());
                    let got = unpack(download_columns(&gpu, &stream, &[&joined]).unwrap().remove(0)).unwrap();
                    let want = concat(&arrays.iter().map(|a| a.as_ref()).collect::<Vec<&dyn Array>>()).unwrap();
                    assert_eq!(got.as_ref(), want.as_ref(), "{dt}, nulls {nulls}, {parts} parts");
                    assert_eq!(got.null_count(), want.null_count(), "{dt}, nulls {nulls}, {parts} parts");
                }
            }
        }
    }
}
