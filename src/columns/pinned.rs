//! Tables held in page-locked (pinned) host memory.
//!
//! An in-memory table scanned by a GPU operator crosses PCIe on every query. From ordinary
//! (pageable) memory each upload costs a host copy into the staging buffers first, and those
//! copies, not the link, bound scans of large tables: on the H100 machine q1 of TPC-H SF10
//! spent about 40% of each partition's time copying into staging (docs/option-notes.md).
//! Registering the table's memory while queries ran (`cuMemHostRegister`) cost more than it
//! saved, because tables are made of many small buffers.
//!
//! [`pin_partitions`] instead copies a table once, when it is loaded, into pinned memory of the
//! device's pool: the batches keep their schema, values and layout (they remain ordinary Arrow
//! batches the CPU reads as before), but each column of a partition now lies in one pinned
//! block, its batches' buffers end to end, so the DMA engine reads them directly and the buffers
//! of consecutive batches go up in one copy. The blocks are held ([`PinnedPool::alloc_held`]):
//! huge-page-advised mappings page-locked in place, freed only with the table and after the
//! device has finished with them, so uploads from them return without waiting for their copies.
//! The memory is the host's; nothing stays on the device between queries.

use std::ptr::NonNull;
use std::sync::Arc;

use datafusion::arrow::alloc::Allocation;
use datafusion::arrow::array::{ArrayData, ArrayRef, make_array};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use rayon::prelude::*;

use super::host::{AssembledColumn, NarrowedValues, RowLengths};
use crate::device::pinned::PinnedBlock;
use crate::device::{Gpu, PinnedPool};
use crate::error::gpu_error;

/// Alignment of each buffer inside a block (Arrow's own allocation alignment).
const ALIGN: usize = 64;

fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Visits every buffer of `d` in the order a block holds them: validity, buffers, then children,
/// depth first. [`rebuild`] takes the copies back in this order.
fn for_each_buffer(d: &ArrayData, f: &mut impl FnMut(&Buffer)) {
    if let Some(n) = d.nulls() {
        f(n.buffer());
    }
    d.buffers().iter().for_each(&mut *f);
    for c in d.child_data() {
        for_each_buffer(c, f);
    }
}

/// Bytes a copy of `d` takes in a block: each of its buffers, aligned.
fn data_bytes(d: &ArrayData) -> usize {
    let mut total = 0;
    for_each_buffer(d, &mut |b| total += aligned(b.len()));
    total
}

/// Copies every buffer of `d` to `base + *pos` onwards, recording where each went.
///
/// SAFETY: `base` must be valid for writes of `data_bytes(d)` bytes from `*pos`.
unsafe fn copy_data(d: &ArrayData, base: *mut u8, pos: &mut usize, offsets: &mut Vec<usize>) {
    for_each_buffer(d, &mut |b| {
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), base.add(*pos), b.len()) };
        offsets.push(*pos);
        *pos += aligned(b.len());
    });
}

/// The `len` bytes of `block` from `off` as a buffer of its own that keeps the block allocated.
fn block_buffer(block: &Arc<PinnedBlock>, off: usize, len: usize) -> Result<Buffer> {
    if off + len > block.capacity() {
        return Err(gpu_error("pinned copy ran past its block"));
    }
    let ptr =
        NonNull::new(block.as_ptr().wrapping_add(off) as *mut u8).ok_or_else(|| gpu_error("null pinned block"))?;
    let owner: Arc<dyn Allocation> = Arc::clone(block) as _;
    // SAFETY: `len` bytes from `ptr` lie in the block, which `owner` keeps allocated.
    Ok(unsafe { Buffer::from_custom_allocation(ptr, len, owner) })
}

/// `d` over the copies of its buffers in `block`, taken from `offsets` in [`copy_data`]'s order.
/// Each buffer is an allocation of its own length that shares the block (not a slice of one
/// block-sized buffer), so that Arrow's memory sizes, which DataFusion's memory accounting sums,
/// count each batch's bytes once.
fn rebuild(d: &ArrayData, block: &Arc<PinnedBlock>, offsets: &mut std::slice::Iter<'_, usize>) -> Result<ArrayData> {
    let mut next = |len: usize| -> Result<Buffer> {
        let off = *offsets.next().ok_or_else(|| gpu_error("pinned copy lost track of a buffer"))?;
        block_buffer(block, off, len)
    };
    let nulls = match d.nulls() {
        Some(n) => {
            let bits = BooleanBuffer::new(next(n.buffer().len())?, n.offset(), n.len());
            // SAFETY: the same bits as `n`, so the same null count.
            Some(unsafe { NullBuffer::new_unchecked(bits, n.null_count()) })
        }
        None => None,
    };
    let buffers = d.buffers().iter().map(|b| next(b.len())).collect::<Result<Vec<_>>>()?;
    let children = d.child_data().iter().map(|c| rebuild(c, block, offsets)).collect::<Result<Vec<_>>>()?;
    let builder = ArrayData::builder(d.data_type().clone())
        .len(d.len())
        .offset(d.offset())
        .nulls(nulls)
        .buffers(buffers)
        .child_data(children);
    // SAFETY: byte for byte the buffers of `d`, a valid array, with its type, length and offset.
    Ok(unsafe { builder.build_unchecked() })
}

/// One column of a partition (the column's array in each batch) copied into one pinned block.
fn pin_column(pool: &Arc<PinnedPool>, limit: u64, arrays: &[&ArrayRef]) -> Result<Vec<ArrayRef>> {
    let datas: Vec<ArrayData> = arrays.iter().map(|a| a.to_data()).collect();
    let total: usize = datas.iter().map(data_bytes).sum();
    if total == 0 {
        return Ok(arrays.iter().map(|a| Arc::clone(a)).collect());
    }
    let mut block = pool.alloc_held(total, limit)?;
    let base = block.as_mut_ptr();
    let mut pos = 0usize;
    let mut offsets = Vec::new();
    for d in &datas {
        // SAFETY: the block holds `total` bytes, the sum of `data_bytes` over `datas`.
        unsafe { copy_data(d, base, &mut pos, &mut offsets) };
    }
    let block = Arc::new(block);
    let mut it = offsets.iter();
    datas.iter().map(|d| Ok(make_array(rebuild(d, &block, &mut it)?))).collect()
}

/// `partitions` copied into pinned host memory of `gpu`'s pool: the same schema, batches, rows
/// and values, each partition's column in one held block (see the module documentation and
/// [`PinnedPool::alloc_held`]). Fails when the host cannot lock that much memory, or it would
/// take the process's pinned memory over `gpu.memory.pinned_limit`; the blocks already filled
/// are then freed.
pub fn pin_partitions(gpu: &Gpu, partitions: &[Vec<RecordBatch>]) -> Result<Vec<Vec<RecordBatch>>> {
    let (pool, limit) = (gpu.pinned(), gpu.pinned_limit());
    partitions
        .par_iter()
        .map(|batches| {
            let Some(first) = batches.first() else { return Ok(Vec::new()) };
            let schema = first.schema();
            let columns = (0..first.num_columns())
                .map(|c| pin_column(pool, limit, &batches.iter().map(|b| b.column(c)).collect::<Vec<_>>()))
                .collect::<Result<Vec<_>>>()?;
            (0..batches.len())
                .map(|i| {
                    let arrays = columns.iter().map(|col| Arc::clone(&col[i])).collect();
                    Ok(RecordBatch::try_new_with_options(
                        Arc::clone(&schema),
                        arrays,
                        &datafusion::arrow::record_batch::RecordBatchOptions::new()
                            .with_row_count(Some(batches[i].num_rows())),
                    )?)
                })
                .collect()
        })
        .collect()
}

/// The host buffers of an assembled column that are sent whole: its narrowed values, row
/// lengths and tile starts.
fn whole_buffers<'a>(
    narrowed: &'a mut Option<NarrowedValues>,
    lengths: &'a mut Option<RowLengths>,
) -> Vec<&'a mut Buffer> {
    let mut all: Vec<&mut Buffer> = Vec::new();
    if let Some(n) = narrowed {
        all.push(&mut n.values);
    }
    if let Some(l) = lengths {
        all.push(&mut l.lengths);
        all.push(&mut l.tile_starts);
    }
    all
}

/// Every host buffer of an assembled column, in a fixed order: [`whole_buffers`], then the parts
/// of its buffers and of its validity.
fn image_buffers(column: &mut AssembledColumn) -> Vec<&mut Buffer> {
    let AssembledColumn { buffers, validity, narrowed, lengths, .. } = column;
    let mut all = whole_buffers(narrowed, lengths);
    for b in buffers.iter_mut().chain(validity.as_mut()) {
        all.extend(b.parts.iter_mut().map(|(p, _)| p));
    }
    all
}

/// `column` (a table's host image, [`crate::columns::image`]) with every host buffer it holds
/// copied into one held block of `pool`, so that an upload DMAs them as they are instead of
/// copying them into the staging buffers first (see the module documentation). A buffer's parts
/// lie end to end in the block; parts that lie end to end on the device too (a string column's
/// bytes, a part per range of rows) become one part, sent in one copy. Fails when the host cannot
/// lock that much memory, or it would take the process's pinned memory over `limit`.
pub fn pin_image(pool: &Arc<PinnedPool>, limit: u64, column: &AssembledColumn) -> Result<AssembledColumn> {
    let mut pinned = column.clone();
    // At most: each buffer aligned on its own.
    let total: usize = image_buffers(&mut pinned).iter().map(|b| aligned(b.len())).sum();
    if total == 0 {
        return Ok(pinned);
    }
    let mut block = pool.alloc_held(total, limit)?;
    let base = block.as_mut_ptr();
    let mut pos = 0usize;
    // Copies `b` to the block at `pos` onwards; its offset.
    let copy_in = |b: &Buffer, pos: &mut usize| {
        // SAFETY: the copies end within `total` bytes: each run of parts takes at most its
        // parts' aligned lengths.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), base.add(*pos), b.len()) };
        *pos += b.len();
        *pos - b.len()
    };
    let mut singles: Vec<(usize, usize)> = Vec::new();
    for b in whole_buffers(&mut pinned.narrowed, &mut pinned.lengths) {
        singles.push((copy_in(b, &mut pos), b.len()));
        pos = aligned(pos);
    }
    // Each assembled buffer's parts end to end: (offset of each part).
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for b in pinned.buffers.iter().chain(pinned.validity.as_ref()) {
        runs.push(b.parts.iter().map(|(p, _)| copy_in(p, &mut pos)).collect());
        pos = aligned(pos);
    }
    let block = Arc::new(block);
    for (b, (off, len)) in whole_buffers(&mut pinned.narrowed, &mut pinned.lengths).into_iter().zip(singles) {
        *b = block_buffer(&block, off, len)?;
    }
    for (b, offsets) in pinned.buffers.iter_mut().chain(pinned.validity.as_mut()).zip(runs) {
        let joined = b.parts.windows(2).all(|w| w[0].1 + w[0].0.len() == w[1].1);
        match (joined, b.parts.first(), offsets.first()) {
            (true, Some(&(_, at)), Some(&off)) if b.parts.len() > 1 => {
                let len = b.parts.iter().map(|(p, _)| p.len()).sum();
                b.parts = vec![(block_buffer(&block, off, len)?, at)];
            }
            _ => {
                for ((p, _), off) in b.parts.iter_mut().zip(offsets) {
                    *p = block_buffer(&block, off, p.len())?;
                }
            }
        }
    }
    Ok(pinned)
}

/// Whether every buffer of `batch`'s columns lies in `gpu`'s pinned memory.
pub fn is_pinned(gpu: &Gpu, batch: &RecordBatch) -> bool {
    let mut all = true;
    for c in batch.columns() {
        for_each_buffer(&c.to_data(), &mut |b| all &= b.is_empty() || gpu.pinned().contains(b.as_slice()));
    }
    all
}

/// Whether `plan` scans in-memory batches that lie in `gpu`'s pinned memory (judged by the first
/// non-empty batch), so uploading its rows costs a DMA and no host copy.
pub fn scans_pinned_memory(plan: &Arc<dyn ExecutionPlan>, gpu: &Gpu) -> bool {
    let Some(source) = plan.downcast_ref::<DataSourceExec>() else { return false };
    let Some(memory) = source.data_source().downcast_ref::<MemorySourceConfig>() else { return false };
    memory.partitions().iter().flatten().find(|b| b.num_rows() > 0).is_some_and(|b| is_pinned(gpu, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::host::AssembledBuffer;
    use crate::testing::{gpu_lock, gpu_or_skip};
    use datafusion::arrow::array::{Decimal128Array, Int32Array, StringArray, StringViewArray};
    use datafusion::arrow::compute::concat_batches;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use rand::{Rng, SeedableRng};

    /// Whether every host buffer of `column` lies in `pool`'s pinned memory.
    fn image_is_pinned(pool: &PinnedPool, column: &AssembledColumn) -> bool {
        let mut column = column.clone();
        image_buffers(&mut column).iter().all(|b| b.is_empty() || pool.contains(b.as_slice()))
    }

    /// A pinned host image holds the same bytes as the image it copies (narrowed values; a string
    /// column's lengths, tile starts, bytes and validity), every one of them in the pool.
    #[test]
    fn gpu_pinned_images_keep_every_byte() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_pinned_images_keep_every_byte") else { return };
        let seed = crate::testing::fresh_seed("pinned_images");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let batches = rng.random_range(1..6);
        let ints: Vec<ArrayRef> = (0..batches)
            .map(|_| {
                let n = rng.random_range(1..4000);
                Arc::new(Int32Array::from_iter_values((0..n).map(|_| rng.random_range(-70_000..70_000)))) as ArrayRef
            })
            .collect();
        let strings: Vec<ArrayRef> = (0..batches)
            .map(|_| {
                let n = rng.random_range(1..4000);
                Arc::new(StringViewArray::from_iter((0..n).map(|i| {
                    rng.random_bool(0.9).then(|| format!("{}{i}", "a string past twelve bytes ".repeat(i % 2)))
                }))) as ArrayRef
            })
            .collect();
        for (data_type, arrays) in [(DataType::Int32, ints), (DataType::Utf8View, strings)] {
            let image = crate::columns::image::column_image(&data_type, &arrays).unwrap().unwrap();
            let pinned = pin_image(gpu.pinned(), gpu.pinned_limit(), &image).unwrap();
            assert!(!image_is_pinned(gpu.pinned(), &image), "{data_type}: the source image is pinned already");
            assert!(
                image_is_pinned(gpu.pinned(), &pinned),
                "{data_type}: a pinned image has a buffer outside the pool"
            );
            assert_eq!(pinned.host_bytes(), image.host_bytes(), "{data_type}, seed {seed}");
            let (mut a, mut b) = (image.clone(), pinned.clone());
            let whole = |c: &mut AssembledColumn| -> Vec<Vec<u8>> {
                whole_buffers(&mut c.narrowed, &mut c.lengths).iter().map(|b| b.as_slice().to_vec()).collect()
            };
            assert_eq!(whole(&mut a), whole(&mut b), "{data_type}: a pinned buffer differs, seed {seed}");
            // A buffer's parts hold the same bytes for the same places; a string column's bytes,
            // a part per range of rows on the host, are one part once pinned.
            for (x, y) in image.buffers.iter().chain(&image.validity).zip(pinned.buffers.iter().chain(&pinned.validity))
            {
                let bytes =
                    |b: &AssembledBuffer| b.parts.iter().flat_map(|(p, _)| p.as_slice().to_vec()).collect::<Vec<u8>>();
                assert_eq!(bytes(x), bytes(y), "{data_type}: pinned parts differ, seed {seed}");
                assert_eq!(x.parts.first().map(|p| p.1), y.parts.first().map(|p| p.1));
                assert!(y.parts.len() <= 1, "{data_type}: {} pinned parts of {}", y.parts.len(), x.parts.len());
            }
        }
    }

    /// Pinned copies hold the same values (nulls, views with long strings, slices, decimals) and
    /// lie in the pool; each column's batches share one block, end to end.
    #[test]
    fn gpu_pinned_partitions_keep_every_value() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_pinned_partitions_keep_every_value") else { return };
        let seed = crate::testing::fresh_seed("pinned_partitions");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("d", DataType::Decimal128(15, 2), false),
            Field::new("s", DataType::Utf8View, true),
            Field::new("u", DataType::Utf8, false),
        ]));
        let mut partitions = Vec::new();
        for _ in 0..3 {
            let mut batches = Vec::new();
            for _ in 0..rng.random_range(0..5) {
                let n = rng.random_range(0..3000);
                let k: Int32Array = (0..n).map(|_| rng.random_bool(0.8).then(|| rng.random_range(-50..50))).collect();
                let d = Decimal128Array::from_iter_values((0..n).map(|_| rng.random_range(-1_000_000i128..1_000_000)))
                    .with_precision_and_scale(15, 2)
                    .unwrap();
                let s: StringViewArray = (0..n)
                    .map(|i| rng.random_bool(0.9).then(|| format!("{}-{}", "long string value ".repeat(i % 3), i)))
                    .collect();
                let u: StringArray = (0..n).map(|i| Some(format!("u{i}"))).collect();
                let b =
                    RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(k), Arc::new(d), Arc::new(s), Arc::new(u)])
                        .unwrap();
                // Sliced batches keep their offsets.
                let off = if n > 10 { rng.random_range(0..10) } else { 0 };
                batches.push(b.slice(off, n - off));
            }
            partitions.push(batches);
        }
        let pinned = pin_partitions(&gpu, &partitions).unwrap();
        assert_eq!(pinned.len(), partitions.len());
        for (p, q) in partitions.iter().zip(&pinned) {
            assert_eq!(p.len(), q.len());
            for (a, b) in p.iter().zip(q) {
                assert!(is_pinned(&gpu, b), "a pinned batch has a buffer outside the pool");
                assert_eq!(a, b, "a pinned batch differs from its source");
                assert!(
                    b.get_array_memory_size() <= a.get_array_memory_size() + 64 * 8 * b.num_columns(),
                    "a pinned batch reports {} bytes against its source's {}",
                    b.get_array_memory_size(),
                    a.get_array_memory_size()
                );
            }
            if let (Some(first), Some(last)) = (q.first(), q.last()) {
                // The key column's values of consecutive batches lie in one block, in order.
                let start = first.column(0).to_data().buffers()[0].as_ptr() as usize;
                let end = last.column(0).to_data().buffers()[0].as_ptr() as usize;
                assert!(end >= start, "batches of a column are not in order in their block");
            }
            let whole = concat_batches(&schema, p).unwrap();
            let whole_pinned = concat_batches(&schema, q).unwrap();
            assert_eq!(whole, whole_pinned);
            if q.is_empty() {
                continue;
            }
            // Uploaded straight from the pinned blocks (pieces end to end merged into one copy),
            // the rows come back the same.
            let stream = gpu.stream();
            let back = crate::columns::DeviceBatch::upload_concat(&gpu, &stream, q).unwrap().download().unwrap();
            assert_eq!(back, whole, "pinned batches uploaded and downloaded differ (seed {seed})");
        }
    }
}
