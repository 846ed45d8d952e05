//! How a cached scan of in-memory batches lays a table's partitions out in device batches
//! ([`ScanLayouts`]), and the load of one device partition's columns through the table cache
//! ([`load_partition`]).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::internal_err;
use datafusion::error::Result;
use datafusion::physical_plan::metrics::Time;

use super::cached_scan::CACHED_SCAN_NAME;
use super::resident::device_batch_groups;
use crate::aggregate::dictionary::dictionary_encode;
use crate::columns::cache::{CachedChunk, ColumnKey, TableCache};
use crate::columns::host::AssembledColumn;
use crate::columns::image::column_image;
use crate::columns::packed::{PackedColumn, pack_columns};
use crate::columns::pinned::pin_image;
use crate::columns::{DeviceBatch, DeviceColumn};
use crate::device::{Gpu, PinnedPool};
use crate::error::gpu_error;

/// One partition's scan: the device batches it hands out, as the cache keeps them (a packed
/// column is widened only as its batch is read, [`ready_batch`]), and what it did, for the
/// metrics.
pub(crate) struct Loaded {
    pub(crate) batches: Vec<LoadedBatch>,
    /// Each of the scan's columns' cache key: where a column widened for a batch is offered back.
    pub(crate) keys: Vec<ColumnKey>,
    pub(crate) hits: usize,
    pub(crate) misses: usize,
    pub(crate) uploaded_bytes: usize,
}

/// A device batch a scan hands out, each column as the cache keeps it.
pub(crate) struct LoadedBatch {
    pub(crate) columns: Vec<CachedChunk>,
    pub(crate) rows: usize,
}

impl LoadedBatch {
    /// Batch `chunk` of `columns` (each one's chunks, in batch order).
    pub(crate) fn of(columns: &[Vec<CachedChunk>], chunk: usize) -> Result<LoadedBatch> {
        let columns: Vec<CachedChunk> = columns
            .iter()
            .map(|c| c.get(chunk).cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| gpu_error(format!("a cached scan's columns have no device batch {chunk}")))?;
        let rows = columns.first().map_or(0, CachedChunk::len);
        Ok(LoadedBatch { columns, rows })
    }

    /// Device bytes its columns take at full width: what a reader of every column reads once.
    pub(crate) fn wide_byte_size(&self) -> usize {
        self.columns.iter().map(CachedChunk::wide_byte_size).sum()
    }
}

/// `batch` (device batch `chunk` of a scan whose columns are cached under `keys`) as a device
/// batch of `schema`: its packed columns widened on a stream of `gpu` (a column listed twice
/// once) and offered back to `cache` under `limit`. Its work is complete when it is returned, so
/// its consumers may work on a stream of their own.
pub(crate) fn ready_batch(
    gpu: &Arc<Gpu>,
    cache: &TableCache,
    limit: u64,
    schema: &SchemaRef,
    keys: &[ColumnKey],
    chunk: usize,
    batch: LoadedBatch,
) -> Result<DeviceBatch> {
    let stream = gpu.stream();
    let mut widened: Vec<(usize, usize, Arc<PackedColumn>, Arc<DeviceColumn>)> = Vec::new();
    let mut columns: Vec<Arc<DeviceColumn>> = Vec::with_capacity(batch.columns.len());
    for (i, c) in batch.columns.into_iter().enumerate() {
        match c {
            CachedChunk::Ready(c) => columns.push(c),
            CachedChunk::Packed(p) => match widened.iter().find(|(_, _, q, _)| Arc::ptr_eq(q, &p)) {
                Some((_, _, _, wide)) => columns.push(Arc::clone(wide)),
                None => {
                    let wide = Arc::new(p.widen(gpu, &stream)?);
                    columns.push(Arc::clone(&wide));
                    widened.push((i, chunk, p, wide));
                }
            },
        }
    }
    if !widened.is_empty() {
        stream.synchronize().map_err(|e| gpu_error(format!("widening cached columns: {e}")))?;
        if keys.len() == columns.len() {
            cache.offer_wide(keys, widened, limit);
        }
    }
    DeviceBatch::try_new(Arc::clone(schema), columns, batch.rows, Arc::clone(gpu), stream)
}

/// How a table's partitions are grouped and cut into device batches of `batch_rows` rows
/// (`gpu.table_cache.batch_rows`), and the cache key of each of their columns: computed at the
/// first scan (a column's key at the first scan reading it) and kept for later scans of the same
/// batches. Without it each query's scan would walk every host batch again (SF10's `lineorder`:
/// 458 batches of 8,192 rows a partition) to cut them and to key its columns.
///
/// A GPU parent's partition `i` reads device partition `i`: the `i`-th run of consecutive host
/// partitions whose rows fit `batch_rows` together ([`device_partitions`]), or nothing past the
/// last run. A CPU parent reads the host partitions as they are. A scan whose partitions are each
/// sorted (a `MemTable` with a sort order) keeps them apart: two sorted partitions run together
/// are not sorted, and a parent may rely on the order.
#[derive(Debug)]
pub(crate) struct ScanLayouts {
    batch_rows: usize,
    /// Whether consecutive partitions may share a device partition.
    pub(crate) merge: bool,
    /// The host partitions each device partition reads.
    groups: OnceLock<Vec<Range<usize>>>,
    /// Each device partition's layout (at most one per host partition).
    devices: Vec<OnceLock<PartitionLayout>>,
}

impl ScanLayouts {
    /// The layouts of a table of `partitions` partitions read in device batches of `batch_rows`
    /// rows, consecutive partitions merged.
    pub(crate) fn new(partitions: usize, batch_rows: usize) -> Self {
        Self::with_merge(partitions, batch_rows, true)
    }

    /// As [`ScanLayouts::new`], each partition on its own when `merge` is false (cut into
    /// batches, in order).
    pub(crate) fn with_merge(partitions: usize, batch_rows: usize, merge: bool) -> Self {
        let batch_rows = batch_rows.max(1);
        let devices = (0..partitions).map(|_| OnceLock::new()).collect();
        ScanLayouts { batch_rows, merge, groups: OnceLock::new(), devices }
    }

    pub(crate) fn batch_rows(&self) -> usize {
        self.batch_rows
    }

    /// Whether these layouts cut device batches of `batch_rows` rows (a session's
    /// `gpu.table_cache.batch_rows`).
    pub(crate) fn cuts_by(&self, batch_rows: usize) -> bool {
        self.batch_rows == batch_rows.max(1)
    }

    /// The host partitions each device partition reads, for a table whose host partitions are
    /// `host`: computed once.
    pub(crate) fn groups(&self, host: &[Vec<RecordBatch>]) -> &[Range<usize>] {
        self.groups.get_or_init(|| {
            let rows: Vec<usize> = host.iter().map(|p| p.iter().map(RecordBatch::num_rows).sum()).collect();
            match self.merge {
                true => device_partitions(&rows, self.batch_rows),
                false => (0..rows.len()).map(|i| i..i + 1).collect(),
            }
        })
    }

    /// Makes the host images of `columns` (table columns) for every device partition of a table
    /// whose host partitions are `host`, on several threads; with `pin` (a pinned pool and the
    /// limit on its bytes), in page-locked memory where it has room.
    pub(crate) fn make_images(
        &self,
        host: &[Vec<RecordBatch>],
        columns: &[usize],
        pin: Option<(&Arc<PinnedPool>, u64)>,
    ) -> Result<()> {
        use rayon::prelude::*;
        let layouts: Vec<&PartitionLayout> = (0..self.groups(host).len())
            .map(|p| self.device_partition(p, host))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        let work: Vec<(&PartitionLayout, usize)> =
            layouts.iter().flat_map(|&l| columns.iter().map(move |&c| (l, c))).collect();
        work.par_iter().try_for_each(|(l, c)| l.make_image(*c, pin))
    }

    /// The cache keys of the columns its scans have read so far.
    pub(crate) fn keys(&self) -> Vec<ColumnKey> {
        self.devices
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|l| &l.columns)
            .filter_map(OnceLock::get)
            .map(|c| c.key.clone())
            .collect()
    }

    /// Host bytes the images made so far hold: all of them, and those in page-locked memory.
    pub(crate) fn image_bytes(&self) -> (usize, usize) {
        self.devices
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|l| &l.columns)
            .filter_map(OnceLock::get)
            .filter_map(|c| c.images.get()?.as_ref())
            .map(|i| {
                let bytes: usize = i.chunks.iter().map(AssembledColumn::host_bytes).sum();
                (bytes, if i.pinned { bytes } else { 0 })
            })
            .fold((0, 0), |(a, p), (b, q)| (a + b, p + q))
    }

    /// The layout of device partition `partition` of a table whose host partitions are `host`
    /// (`None`: it reads no rows).
    pub(crate) fn device_partition(
        &self,
        partition: usize,
        host: &[Vec<RecordBatch>],
    ) -> Result<Option<&PartitionLayout>> {
        let Some(range) = self.groups(host).get(partition) else { return Ok(None) };
        let (Some(cell), Some(parts)) = (self.devices.get(partition), host.get(range.clone())) else {
            return internal_err!(
                "{CACHED_SCAN_NAME}: no layout for device partition {partition} of a table of {} partitions",
                host.len()
            );
        };
        Ok(Some(cell.get_or_init(|| {
            let batches: Vec<RecordBatch> = parts.iter().flatten().cloned().collect();
            PartitionLayout::new(&batches, self.batch_rows)
        })))
    }
}

/// The host partitions (of `rows` rows each) each device partition reads: runs of consecutive
/// partitions, a run ending where the next partition would take it past `batch_rows` rows (a
/// partition larger than that on its own is cut into several device batches). An empty partition
/// joins the run before it.
pub(crate) fn device_partitions(rows: &[usize], batch_rows: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut taken) = (0, 0usize);
    for (i, &r) in rows.iter().enumerate() {
        if taken > 0 && r > 0 && taken.saturating_add(r) > batch_rows {
            out.push(start..i);
            (start, taken) = (i, 0);
        }
        taken = taken.saturating_add(r);
    }
    if start < rows.len() {
        out.push(start..rows.len());
    }
    out
}

/// One device partition's [`ScanLayouts`].
#[derive(Debug)]
pub(crate) struct PartitionLayout {
    /// Its non-empty host batches.
    batches: Vec<RecordBatch>,
    /// The rows of each device batch: every column of the partition is cut the same way.
    chunk_rows: Vec<usize>,
    /// Each table column, once a scan read it.
    columns: Vec<OnceLock<ScanColumn>>,
    batch_rows: usize,
}

/// One table column of a device partition: its host arrays, one per host batch (shared with the
/// cache entries made from them and read by the uploads without a batch per host batch), its
/// cache key, and once made ([`ScanLayouts::make_images`]) its host image per device batch.
#[derive(Debug)]
struct ScanColumn {
    arrays: Arc<[ArrayRef]>,
    key: ColumnKey,
    /// The column's host image, or `None`: it has none (its uploads read the arrays).
    images: OnceLock<Option<ColumnImage>>,
}

/// A column's host image: one per device batch of its partition ([`column_image`]).
#[derive(Debug)]
struct ColumnImage {
    chunks: Vec<AssembledColumn>,
    /// Whether they lie in page-locked memory ([`pin_image`]).
    pinned: bool,
}

impl ScanColumn {
    /// Its host image for device batch `chunk`, if made.
    fn image(&self, chunk: usize) -> Option<&AssembledColumn> {
        self.images.get()?.as_ref()?.chunks.get(chunk)
    }
}

impl PartitionLayout {
    fn new(batches: &[RecordBatch], batch_rows: usize) -> Self {
        let batches: Vec<RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).cloned().collect();
        let columns = batches.first().map_or(0, RecordBatch::num_columns);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        PartitionLayout {
            chunk_rows: chunk_rows(rows, batch_rows),
            columns: (0..columns).map(|_| OnceLock::new()).collect(),
            batches,
            batch_rows,
        }
    }

    /// Table column `c`.
    fn column(&self, c: usize) -> Result<&ScanColumn> {
        let Some(cell) = self.columns.get(c) else {
            return internal_err!("{CACHED_SCAN_NAME}: no column {c} in batches of {} columns", self.columns.len());
        };
        Ok(cell.get_or_init(|| {
            let arrays: Arc<[ArrayRef]> = self.batches.iter().map(|b| Arc::clone(b.column(c))).collect();
            let key = ColumnKey::of(&arrays.iter().collect::<Vec<_>>(), self.batch_rows);
            ScanColumn { arrays, key, images: OnceLock::new() }
        }))
    }

    /// A column's `arrays` (one per host batch) cut into the partition's device batches: as they
    /// are when it has one.
    fn cut<'a>(&self, arrays: &'a [ArrayRef]) -> Vec<Cow<'a, [ArrayRef]>> {
        match self.chunk_rows.len() {
            0 | 1 => vec![Cow::Borrowed(arrays)],
            _ => device_batch_groups(arrays, self.batch_rows).into_iter().map(Cow::Owned).collect(),
        }
    }

    /// Makes table column `c`'s host image for each of the partition's device batches (once),
    /// pinned as [`ScanLayouts::make_images`] says. An image the pool has no room for stays in
    /// ordinary memory.
    fn make_image(&self, c: usize, pin: Option<(&Arc<PinnedPool>, u64)>) -> Result<()> {
        // A partition without rows has nothing to lay out (and no columns to lay out by).
        if self.batches.is_empty() {
            return Ok(());
        }
        let column = self.column(c)?;
        if column.images.get().is_none() {
            let Some(data_type) = column.arrays.first().map(|a| a.data_type().clone()) else { return Ok(()) };
            let images = self
                .cut(&column.arrays)
                .iter()
                .map(|arrays| column_image(&data_type, arrays))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .collect::<Option<Vec<_>>>();
            let images = images.map(|chunks| match pin {
                Some((pool, limit)) => match chunks.iter().map(|i| pin_image(pool, limit, i)).collect() {
                    Ok(chunks) => ColumnImage { chunks, pinned: true },
                    Err(e) => {
                        crate::timeline::mark("cached table", || format!("column {c}'s image stays pageable: {e}"));
                        ColumnImage { chunks, pinned: false }
                    }
                },
                None => ColumnImage { chunks, pinned: false },
            });
            // (Another thread may have made them meanwhile: the same images.)
            let _ = column.images.set(images);
        }
        Ok(())
    }
}

/// The rows of each device batch [`device_batch_groups`] cuts `rows` rows into.
pub(crate) fn chunk_rows(rows: usize, batch_rows: usize) -> Vec<usize> {
    let batch_rows = batch_rows.max(1);
    let mut chunks = vec![batch_rows; rows / batch_rows];
    if rows % batch_rows > 0 {
        chunks.push(rows % batch_rows);
    }
    chunks
}

/// How a scan keeps what it loads in the table cache: under which limit (bytes), and whether
/// packed ([`pack_columns`], `gpu.table_cache.compress`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheTerms {
    pub(crate) limit: u64,
    pub(crate) pack: bool,
}

/// The packed forms of `columns`' device batches (`columns[j][g]`: column `j`'s batch `g`), as
/// the cache keeps them with `terms` (none without packing), on `stream`: fixed-width values in
/// fewer bytes ([`pack_columns`]), strings and binaries of few distinct values as dictionaries
/// ([`dictionary_encode`]). Their work is done when it returns.
pub(crate) fn pack_for_cache(
    gpu: &Gpu,
    stream: &Arc<cudarc::driver::CudaStream>,
    terms: CacheTerms,
    columns: &[Vec<Arc<DeviceColumn>>],
) -> Result<Vec<Vec<Option<PackedColumn>>>> {
    if !terms.pack {
        return Ok(columns.iter().map(|_| Vec::new()).collect());
    }
    let all: Vec<&Arc<DeviceColumn>> = columns.iter().flatten().collect();
    let mut packed = pack_columns(gpu, stream, &all.iter().map(|c| c.as_ref()).collect::<Vec<_>>())?;
    for (slot, col) in packed.iter_mut().zip(&all) {
        if slot.is_none() {
            // The codes are an option: a column the encoder could not code (its group-by found
            // no room on the device, say) is cached as it is.
            *slot = dictionary_encode(gpu, stream, col).unwrap_or_else(|e| {
                log::debug!("a cached {} column of {} rows stays uncoded: {e}", col.data_type, col.len);
                None
            });
        }
    }
    let mut packed = packed.into_iter();
    Ok(columns.iter().map(|c| packed.by_ref().take(c.len()).collect()).collect())
}

/// The device batches of a partition's `columns` (its `layout`): each column from `cache` as it
/// keeps it, or uploaded (all the missing ones together) and offered to it on `terms`.
pub(crate) fn load_partition(
    gpu: &Arc<Gpu>,
    cache: &Arc<TableCache>,
    terms: CacheTerms,
    layout: &PartitionLayout,
    columns: &[usize],
    upload_time: &Time,
) -> Result<Loaded> {
    cache.watch(gpu.device_memory());
    let (batches, chunk_rows) = (&layout.batches, &layout.chunk_rows);
    if batches.is_empty() {
        return Ok(Loaded { batches: Vec::new(), keys: Vec::new(), hits: 0, misses: 0, uploaded_bytes: 0 });
    }
    let scanned: Vec<&ScanColumn> = columns.iter().map(|&c| layout.column(c)).collect::<Result<_>>()?;
    let fits = |chunks: &Vec<CachedChunk>| {
        chunks.len() == chunk_rows.len() && chunks.iter().zip(chunk_rows).all(|(c, &r)| c.len() == r)
    };
    let keys: Vec<ColumnKey> = scanned.iter().map(|s| s.key.clone()).collect();
    let mut found: Vec<Option<Vec<CachedChunk>>> =
        cache.read_chunks(&keys, terms.limit).into_iter().map(|f| f.filter(fits)).collect();
    // Each missing table column once, even when the scan lists it twice.
    let mut missing: Vec<usize> = Vec::new();
    let mut missing_columns: Vec<&ScanColumn> = Vec::new();
    for (i, f) in found.iter().enumerate() {
        if f.is_none() && !missing.contains(&columns[i]) {
            missing.push(columns[i]);
            missing_columns.push(scanned[i]);
        }
    }
    let hits = found.iter().filter(|f| f.is_some()).count();
    let mut uploaded_bytes = 0;
    if !missing.is_empty() {
        let _timer = upload_time.timer();
        // The missing columns' arrays as they are: a batch per host batch (7,300 for SF10's
        // `lineorder`), made and dropped on one thread, took milliseconds of a cold scan.
        let first = batches.first().ok_or_else(|| gpu_error("a cached scan has no host batch to upload"))?;
        let missing_schema = Arc::new(first.schema().project(&missing)?);
        let stream = gpu.stream();
        // Each column cut into the device batches' rows, every column the same way; columns
        // with a host image send it, the others their arrays.
        let cut: Vec<Vec<Cow<'_, [ArrayRef]>>> = missing_columns.iter().map(|s| layout.cut(&s.arrays)).collect();
        let uploaded = (0..chunk_rows.len())
            .map(|g| {
                let arrays: Vec<&[ArrayRef]> = cut.iter().map(|c| c.get(g).map_or(&[][..], |a| a.as_ref())).collect();
                let images: Vec<Option<&AssembledColumn>> = missing_columns.iter().map(|s| s.image(g)).collect();
                DeviceBatch::upload_concat_columns(gpu, &stream, Arc::clone(&missing_schema), &arrays, &images)
            })
            .collect::<Result<Vec<_>>>()?;
        crate::timeline::mark("cached scan", || format!("{} columns staged", missing.len()));
        // Complete before the cache hands the columns to other queries' streams.
        stream.synchronize().map_err(|e| gpu_error(format!("waiting for a cached table's upload: {e}")))?;
        crate::timeline::mark("cached scan", || "upload complete on the device".into());
        uploaded_bytes = uploaded.iter().map(DeviceBatch::byte_size).sum();
        let loaded: Vec<Vec<Arc<DeviceColumn>>> =
            (0..missing.len()).map(|j| uploaded.iter().map(|d| Arc::clone(&d.columns()[j])).collect()).collect();
        let packed = pack_for_cache(gpu, &stream, terms, &loaded)?;
        for (((&c, column), chunks), packed) in missing.iter().zip(&missing_columns).zip(loaded).zip(packed) {
            let ready: Vec<CachedChunk> = chunks.iter().map(|c| CachedChunk::Ready(Arc::clone(c))).collect();
            if !fits(&ready) {
                return internal_err!("a cached scan cut column {c} into other batches than its partition's");
            }
            for (i, _) in columns.iter().enumerate().filter(|(_, col)| **col == c) {
                found[i] = Some(ready.clone());
            }
            cache.insert_packed(column.key.clone(), chunks, packed, Some(Arc::clone(&column.arrays)), terms.limit);
        }
        crate::timeline::mark("cached scan", || "columns cached".into());
    }
    let found: Vec<Vec<CachedChunk>> = found
        .into_iter()
        .map(|f| f.ok_or_else(|| gpu_error("a cached scan lost a column it uploaded")))
        .collect::<Result<_>>()?;
    let batches = (0..chunk_rows.len()).map(|i| LoadedBatch::of(&found, i)).collect::<Result<Vec<_>>>()?;
    Ok(Loaded { batches, keys, hits, misses: missing.len(), uploaded_bytes })
}
