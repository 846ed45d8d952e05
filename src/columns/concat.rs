//! Concatenating row ranges of host columns into device columns (kernels/spill.cu), as the
//! out-of-core join restores a partition from the chunks it was spilled in: fixed-width values
//! and string bytes by DMA copies at their offsets, validity and Boolean bitmaps bit by bit (ranges
//! need not start or end on a byte), and string offsets moved behind the bytes of the ranges
//! before them. Dictionaries are not handled: their pieces may hold different dictionaries.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::buffer::{BooleanBuffer, Buffer};
use datafusion::arrow::datatypes::DataType;

use super::{DeviceColumn, HostColumn};
use crate::device::transfer::UploadPiece;
use crate::device::{DeviceBuffer, Gpu, KArg, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::select::bitmap_bytes;

/// Whether [`upload_row_ranges`] handles columns of type `dt`.
pub fn can_concat(dt: &DataType) -> bool {
    !matches!(dt, DataType::Dictionary(..)) && crate::columns::is_supported(dt)
}

/// Offset width in bytes of a string or binary type as stored on the device, or `None`.
fn offset_width(dt: &DataType) -> Option<usize> {
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
    let pieces: Vec<UploadPiece<'_>> = host
        .iter()
        .filter(|(b, _, _)| !b.is_empty())
        .map(|(b, d, at)| UploadPiece { src: b, dst: &dests[*d], dst_offset: *at })
        .collect();
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
                "spill",
                "concat_bits",
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
        let kernel = if ow == 4 { "concat_offsets_i32" } else { "concat_offsets_i64" };
        let mut row = 0usize;
        for ((_, r), &(t, delta)) in parts.iter().zip(&temps) {
            // concat_offsets_iXX(const O* src, u64 n, i64 delta, O* dst)
            let dst = dests[offsets].raw_ptr(stream) + (row * ow) as u64;
            gpu.launch_n(
                stream,
                "spill",
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

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, ArrayRef};
    use datafusion::arrow::compute::concat;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::columns::{pack, unpack};
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
}
