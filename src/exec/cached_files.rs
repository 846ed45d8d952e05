//! The files of a Parquet scan as the rows of the device's table cache (`gpu.table_cache`).
//!
//! A scan qualifies when the rows it hands out are every row of its files: no row limit, no
//! partition columns, no declared order, no filter applied inside the scan (DataFusion's
//! `pushdown_filters` with a predicate) and a projection of plain columns. Its pruning predicate,
//! which only skips row groups and pages, is left out of the load: the filter above the scan
//! still applies to every row, and the cache keeps each column whole for later queries.
//!
//! The cache's key is each file's path, size, modification time and version as the object store
//! listed them when the query was planned ([`FileVersion`]), with the column's name and type. A
//! column is loaded by DataFusion's Parquet reader in pieces of its own cut (each file whole, or
//! in byte ranges of `LOAD_RANGE_BYTES` that tile it, however the plan cut the files), one piece a
//! task, several at once, each piece uploaded as soon as it is decoded and its host batches then
//! dropped: the host holds a few pieces at a time, never the table. The pieces are joined on the
//! device in path and range order into device batches of up to `gpu.table_cache.batch_rows`
//! rows, each packed for the cache as soon as its pieces are there, its full-width copy kept only
//! while the cache's limit has room: the device holds the pieces of one batch at full width, not
//! the table. Every column of a file set is cut into the same device batches whenever it was
//! loaded.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::metrics::Time;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use futures::{StreamExt, TryStreamExt};

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaStream;

use super::blocking;
use super::cached_layouts::{CacheTerms, Loaded, LoadedBatch, pack_for_cache};
use crate::columns::cache::{CachedChunk, ColumnKey, FileVersion, NewChunk, TableCache};
use crate::columns::{DeviceBatch, DeviceColumn, is_supported};
use crate::device::Gpu;
use crate::error::gpu_error;

/// Bytes of a file each piece of a load reads ([`ScanFiles::load_pieces`]): a row group or two of
/// a typical file, so that the pieces decoded at once, one a core, hold a small part of the host's
/// memory however large the files are.
pub(crate) const LOAD_RANGE_BYTES: u64 = 64 << 20;

/// What a load makes of each device batch of a table as its pieces are joined (see
/// [`ScanFiles::load`]).
pub(crate) type FinishBatch<T> = Arc<dyn Fn(&Arc<Gpu>, &Arc<CudaStream>, DeviceBatch) -> Result<T> + Send + Sync>;

/// A Parquet scan's files, as the table cache reads them (see the module's text).
pub(crate) struct ScanFiles {
    /// The scan's configuration: its files, options and table schema.
    config: FileScanConfig,
    /// The scan's Parquet options and reader, without its predicate.
    source: ParquetSource,
    /// Every piece of the scan (a file, or a byte range of one), by path, then range start.
    pieces: Vec<PartitionedFile>,
    /// Each file once, by path: the cache's key.
    files: Arc<[FileVersion]>,
}

impl std::fmt::Debug for ScanFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanFiles").field("pieces", &self.pieces.len()).field("files", &self.files).finish()
    }
}

impl ScanFiles {
    /// The files of `plan` and the table columns it reads (indices into the table's schema, in
    /// output order), when it is a Parquet scan whose rows are all its files' rows (see the
    /// module's text) reading at least one column of a device layout; `None` otherwise.
    pub(crate) fn over(plan: &Arc<dyn ExecutionPlan>) -> Option<(ScanFiles, Vec<usize>)> {
        let exec = plan.downcast_ref::<DataSourceExec>()?;
        let config = exec.data_source().downcast_ref::<FileScanConfig>()?;
        let parquet = config.file_source().downcast_ref::<ParquetSource>()?;
        if config.limit.is_some()
            || !config.table_partition_cols().is_empty()
            || !config.output_ordering.is_empty()
            || plan.output_ordering().is_some()
            || (parquet.filter().is_some() && parquet.table_parquet_options().global.pushdown_filters)
        {
            return None;
        }
        let table = parquet.table_schema().table_schema();
        let file_columns = config.file_schema().fields().len();
        let output = plan.schema();
        let projection = parquet.projection()?;
        let columns = projection
            .iter()
            .zip(output.fields())
            .map(|(e, out)| {
                let c = e.expr.downcast_ref::<Column>()?.index();
                let field = table.fields().get(c).filter(|_| c < file_columns)?;
                (field.data_type() == out.data_type() && is_supported(field.data_type())).then_some(c)
            })
            .collect::<Option<Vec<usize>>>()?;
        if columns.is_empty() || columns.len() != output.fields().len() {
            return None;
        }
        let mut pieces: Vec<PartitionedFile> =
            config.file_groups.iter().flat_map(|g| g.files().iter().cloned()).collect();
        if pieces.iter().any(|p| !p.partition_values.is_empty()) {
            return None;
        }
        let store = config.object_store_url.as_str();
        pieces.sort_by(|a, b| {
            (a.object_meta.location.as_ref(), a.range.as_ref().map(|r| r.start))
                .cmp(&(b.object_meta.location.as_ref(), b.range.as_ref().map(|r| r.start)))
        });
        let mut files: Vec<FileVersion> = pieces.iter().map(|p| version(store, p)).collect();
        files.dedup();
        let mut source = ParquetSource::new(parquet.table_schema().clone())
            .with_table_parquet_options(parquet.table_parquet_options().clone());
        if let Some(reader) = parquet.parquet_file_reader_factory() {
            source = source.with_parquet_file_reader_factory(Arc::clone(reader));
        }
        Some((ScanFiles { config: config.clone(), source, pieces, files: files.into() }, columns))
    }

    /// Each file once, by path.
    pub(crate) fn files(&self) -> &Arc<[FileVersion]> {
        &self.files
    }

    /// The table's schema (file columns).
    pub(crate) fn table_schema(&self) -> &SchemaRef {
        self.source.table_schema().table_schema()
    }

    /// The pieces a load reads: each file once, by path, whole when it has at most `range_bytes`
    /// bytes, else cut into byte ranges of `range_bytes` (the last one shorter) that tile it.
    /// DataFusion's Parquet reader reads a row group in the range where its first column's first
    /// page starts, so every row group is read once; the cut depends on the files alone, not on
    /// how the plan cut them, so every column of a file set is cut into the same device batches.
    pub(crate) fn load_pieces(&self, range_bytes: u64) -> Vec<PartitionedFile> {
        let range_bytes = range_bytes.max(1);
        let mut out = Vec::new();
        let mut last: Option<&str> = None;
        for piece in &self.pieces {
            let path = piece.object_meta.location.as_ref();
            if last == Some(path) {
                continue;
            }
            last = Some(path);
            let mut file = piece.clone();
            file.range = None;
            let size = file.object_meta.size;
            if size <= range_bytes {
                out.push(file);
                continue;
            }
            let mut start = 0;
            while start < size {
                let end = start.saturating_add(range_bytes).min(size);
                out.push(file.clone().with_range(start as i64, end as i64));
                start = end;
            }
        }
        out
    }

    /// The scan `builder` makes (see [`ScanFiles::load_config`]), of `piece` alone.
    fn piece_scan(&self, builder: &FileScanConfigBuilder, piece: PartitionedFile) -> FileScanConfig {
        builder.clone().with_file_groups(vec![FileGroup::new(vec![piece])]).build()
    }

    /// A scan's configuration reading table columns `columns` of its files, but no pieces yet.
    fn load_config(&self, columns: &[usize]) -> Result<FileScanConfigBuilder> {
        FileScanConfigBuilder::from(self.config.clone())
            .with_source(Arc::new(self.source.clone()))
            .with_limit(None)
            .with_output_ordering(Vec::new())
            .with_output_partitioning(None)
            .with_projection_indices(Some(columns.to_vec()))
    }

    /// Table columns `columns` of every file as device batches of `schema` (those columns), of up
    /// to `batch_rows` rows each (a piece of more rows than that stands alone), each passed to
    /// `finish` (on a blocking thread, with a stream it may issue work on; that work is complete
    /// when `load` goes on) as soon as its pieces are on the device; returns what `finish` made
    /// of each, in order. The pieces ([`ScanFiles::load_pieces`], `LOAD_RANGE_BYTES` each) are
    /// decoded on tasks of their own, at most one a core at once, each uploaded as it is decoded
    /// and its host batches then dropped: the host holds a few pieces at a time, and the device
    /// the pieces of one batch, not the table.
    pub(crate) async fn load<T: Send + 'static>(
        &self,
        columns: &[usize],
        schema: SchemaRef,
        gpu: &Arc<Gpu>,
        context: Arc<TaskContext>,
        batch_rows: usize,
        finish: FinishBatch<T>,
    ) -> Result<Vec<T>> {
        let builder = self.load_config(columns)?;
        let at_once = std::thread::available_parallelism().map_or(4, |n| n.get());
        let mut parts = futures::stream::iter(self.load_pieces(LOAD_RANGE_BYTES))
            .map(|piece| {
                let task = SpawnedTask::spawn(load_piece(
                    self.piece_scan(&builder, piece),
                    Arc::clone(gpu),
                    Arc::clone(&context),
                ));
                async move {
                    task.join()
                        .await
                        .map_err(|e| DataFusionError::Execution(format!("GPU: loading a Parquet file failed: {e}")))?
                }
            })
            .buffered(at_once);
        let batch_rows = batch_rows.max(1);
        let (mut group, mut taken, mut out) = (Vec::new(), 0usize, Vec::new());
        // The grouping of `device_partitions`, as the pieces arrive (empty ones are dropped).
        while let Some(part) = parts.try_next().await? {
            let Some(part) = part else { continue };
            if taken > 0 && taken.saturating_add(part.num_rows()) > batch_rows {
                let done = std::mem::take(&mut group);
                out.push(finish_group(gpu, &schema, done, &finish).await?);
                taken = 0;
            }
            taken = taken.saturating_add(part.num_rows());
            group.push(part);
        }
        if !group.is_empty() {
            out.push(finish_group(gpu, &schema, group, &finish).await?);
        }
        Ok(out)
    }
}

/// The rows of `parts` joined into one device batch of `schema`, given to `finish`, on a blocking
/// thread; the parts go once that work is complete.
async fn finish_group<T: Send + 'static>(
    gpu: &Arc<Gpu>,
    schema: &SchemaRef,
    parts: Vec<DeviceBatch>,
    finish: &FinishBatch<T>,
) -> Result<T> {
    let (gpu, schema, finish) = (Arc::clone(gpu), Arc::clone(schema), Arc::clone(finish));
    blocking(move || {
        let stream = gpu.stream();
        let batch = DeviceBatch::concat(&gpu, &stream, schema, &parts)?;
        let made = finish(&gpu, &stream, batch)?;
        stream.synchronize().map_err(|e| gpu_error(format!("joining a Parquet table's pieces: {e}")))?;
        drop(parts);
        Ok(made)
    })
    .await
}

/// One piece's rows (`config` reads it alone) as a device batch whose work is complete, or `None`
/// when it has none.
async fn load_piece(config: FileScanConfig, gpu: Arc<Gpu>, context: Arc<TaskContext>) -> Result<Option<DeviceBatch>> {
    let scan = DataSourceExec::from_data_source(config);
    if scan.properties().output_partitioning().partition_count() != 1 {
        return Err(gpu_error("a Parquet piece's scan has more than one partition"));
    }
    let batches: Vec<RecordBatch> = scan.execute(0, context)?.try_collect().await?;
    let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
    if batches.is_empty() {
        return Ok(None);
    }
    blocking(move || {
        let stream = gpu.stream();
        let batch = DeviceBatch::upload_concat(&gpu, &stream, &batches)?;
        drop(batches);
        stream.synchronize().map_err(|e| gpu_error(format!("uploading a Parquet piece: {e}")))?;
        Ok(Some(batch))
    })
    .await
}

/// A piece's file as the store `store` listed it.
fn version(store: &str, piece: &PartitionedFile) -> FileVersion {
    let meta = &piece.object_meta;
    let modified = meta.last_modified;
    FileVersion {
        path: format!("{store}{}", meta.location),
        size: meta.size,
        modified: modified.timestamp_nanos_opt().unwrap_or_else(|| modified.timestamp_micros().saturating_mul(1000)),
        e_tag: meta.e_tag.clone(),
        version: meta.version.clone(),
    }
}

/// The load of a files scan's columns through the cache of `gpu`.
pub(crate) struct FileLoad<'a> {
    pub(crate) files: &'a ScanFiles,
    pub(crate) gpu: &'a Arc<Gpu>,
    pub(crate) cache: &'a Arc<TableCache>,
    pub(crate) terms: CacheTerms,
    pub(crate) batch_rows: usize,
}

impl FileLoad<'_> {
    /// The device batches of table columns `columns` (as `schema`): each column from the cache
    /// as it keeps it, or loaded from the files (all the missing ones together) and offered to
    /// it. Columns found cut otherwise than the others (the files were read with another
    /// `gpu.table_cache.batch_rows`) are loaded again with the rest.
    pub(crate) async fn columns(
        &self,
        columns: &[usize],
        context: Arc<TaskContext>,
        upload_time: &Time,
    ) -> Result<Loaded> {
        self.cache.watch(self.gpu.device_memory());
        let table = Arc::clone(self.files.table_schema());
        let keys: Vec<ColumnKey> = columns
            .iter()
            .map(|&c| {
                let field = table.field(c);
                ColumnKey::of_files(self.files.files(), field.name(), field.data_type(), self.batch_rows)
            })
            .collect();
        let rows_of = |chunks: &Vec<CachedChunk>| chunks.iter().map(CachedChunk::len).collect::<Vec<usize>>();
        let mut found: Vec<Option<Vec<CachedChunk>>> = self.cache.read_chunks(&keys, self.terms.limit);
        let cut = found.iter().flatten().next().map(rows_of);
        if found.iter().flatten().any(|f| Some(rows_of(f)) != cut) {
            found.iter_mut().for_each(|f| *f = None);
        }
        let hits = found.iter().filter(|f| f.is_some()).count();
        let mut missing: Vec<usize> = Vec::new();
        for (i, f) in found.iter().enumerate() {
            if f.is_none() && !missing.contains(&columns[i]) {
                missing.push(columns[i]);
            }
        }
        let mut uploaded_bytes = 0;
        let mut misses = missing.len();
        if !missing.is_empty() {
            let timer = upload_time.timer();
            let mut loaded = self.load(&missing, &table, Arc::clone(&context)).await?;
            let loaded_cut: Vec<usize> = loaded.iter().map(|g| g.first().map_or(0, new_chunk_rows)).collect();
            if cut.as_ref().is_some_and(|c| *c != loaded_cut) {
                // The cached columns were cut otherwise: every column from the files.
                found.iter_mut().for_each(|f| *f = None);
                missing = Vec::new();
                for &c in columns {
                    if !missing.contains(&c) {
                        missing.push(c);
                    }
                }
                misses = missing.len();
                loaded = self.load(&missing, &table, context).await?;
            }
            timer.done();
            uploaded_bytes = loaded.iter().flatten().map(new_chunk_wide_bytes).sum();
            let mut by_column: Vec<Vec<NewChunk>> = missing.iter().map(|_| Vec::with_capacity(loaded.len())).collect();
            for group in loaded {
                for (j, chunk) in group.into_iter().enumerate() {
                    if let Some(column) = by_column.get_mut(j) {
                        column.push(chunk);
                    }
                }
            }
            for (&c, chunks) in missing.iter().zip(by_column) {
                let handed: Vec<CachedChunk> = chunks
                    .iter()
                    .map(|n| match (&n.wide, &n.packed) {
                        (Some(w), _) => Ok(CachedChunk::Ready(Arc::clone(w))),
                        (None, Some(p)) => Ok(CachedChunk::Packed(Arc::clone(p))),
                        (None, None) => {
                            Err(gpu_error("a cached scan of files loaded a column batch it kept no form of"))
                        }
                    })
                    .collect::<Result<_>>()?;
                for (i, _) in columns.iter().enumerate().filter(|(_, col)| **col == c) {
                    found[i] = Some(handed.clone());
                }
                if let Some(key) = columns.iter().position(|col| *col == c).map(|i| keys[i].clone()) {
                    self.cache.insert_chunks(key, chunks, None, self.terms.limit);
                }
            }
        }
        let found: Vec<Vec<CachedChunk>> = found
            .into_iter()
            .map(|f| f.ok_or_else(|| gpu_error("a cached scan of files lost a column it loaded")))
            .collect::<Result<_>>()?;
        let chunks = found.first().map_or(0, Vec::len);
        let batches = (0..chunks).map(|i| LoadedBatch::of(&found, i)).collect::<Result<Vec<_>>>()?;
        Ok(Loaded { batches, keys, hits, misses, uploaded_bytes })
    }

    /// Table columns `columns` of every file, loaded (see [`ScanFiles::load`]), each device batch's
    /// columns as the cache is offered them: packed (`gpu.table_cache.compress`) where packing
    /// saves bytes, with the full-width copy kept beside while the cache's limit has room for it
    /// once the copies of other columns are given up (the scan widens the others as it reads
    /// them), else at full width.
    async fn load(
        &self,
        columns: &[usize],
        table: &SchemaRef,
        context: Arc<TaskContext>,
    ) -> Result<Vec<Vec<NewChunk>>> {
        let schema = Arc::new(table.project(columns)?);
        crate::timeline::mark("cached scan", || format!("loading {} columns from the files", columns.len()));
        let stats = self.cache.stats();
        let room = AtomicU64::new(self.terms.limit.saturating_sub(stats.bytes.saturating_sub(stats.wide_copy_bytes)));
        let terms = self.terms;
        let finish = Arc::new(move |gpu: &Arc<Gpu>, stream: &Arc<CudaStream>, batch: DeviceBatch| {
            let wide: Vec<Vec<Arc<DeviceColumn>>> = batch.columns().iter().map(|c| vec![Arc::clone(c)]).collect();
            let packed = pack_for_cache(gpu, stream, terms, &wide)?;
            let mut packed = packed.into_iter().map(|mut p| p.pop().flatten());
            Ok(wide
                .into_iter()
                .flatten()
                .map(|wide| match packed.next().flatten() {
                    Some(p) => {
                        if !take_room(&room, p.byte_size() as u64) {
                            room.store(0, Ordering::Relaxed);
                        }
                        let keep = take_room(&room, wide.byte_size() as u64);
                        NewChunk { wide: keep.then_some(wide), packed: Some(Arc::new(p)) }
                    }
                    None => NewChunk { wide: Some(wide), packed: None },
                })
                .collect::<Vec<NewChunk>>())
        });
        self.files.load(columns, schema, self.gpu, context, self.batch_rows, finish).await
    }
}

/// Takes `bytes` of `room` when it has them; returns whether it had.
fn take_room(room: &AtomicU64, bytes: u64) -> bool {
    room.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(bytes)).is_ok()
}

/// A loaded column batch's rows.
fn new_chunk_rows(chunk: &NewChunk) -> usize {
    chunk.wide.as_ref().map(|w| w.len).or_else(|| chunk.packed.as_ref().map(|p| p.len)).unwrap_or(0)
}

/// Device bytes a loaded column batch takes at full width.
fn new_chunk_wide_bytes(chunk: &NewChunk) -> usize {
    chunk
        .wide
        .as_ref()
        .map(|w| w.byte_size())
        .or_else(|| chunk.packed.as_ref().map(|p| p.wide_byte_size()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::prelude::SessionContext;

    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::datasource::source::DataSourceExec;
    use futures::TryStreamExt;
    use rand::{Rng, SeedableRng};

    use super::ScanFiles;
    use crate::testing::{ParquetDir, fresh_seed, kvs_batch};

    /// The Parquet scan at the bottom of `sql`'s physical plan.
    async fn scan_of(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let mut node = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        while let Some(child) = node.children().first().map(|c| Arc::clone(c)) {
            node = child;
        }
        node
    }

    /// A plain scan of a Parquet table qualifies, its columns named by table index and its files
    /// listed once each by path (however the plan cut them into ranges); a scan with a row limit,
    /// with its filter applied inside the scan, or of no column does not.
    #[tokio::test]
    async fn parquet_scans_whose_rows_are_their_files_rows_qualify() {
        let dir = ParquetDir::new("scan-files");
        for f in 0..3 {
            dir.write(&format!("part-{f}.parquet"), &[kvs_batch(f * 1000, 1000)], 300);
        }
        let ctx = SessionContext::new();
        ctx.sql("SET datafusion.optimizer.repartition_file_min_size = 1").await.unwrap();
        let location = dir.location();
        ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{location}'")).await.unwrap();
        let plain = scan_of(&ctx, "SELECT s, k FROM t WHERE v > 10").await;
        let (files, columns) = ScanFiles::over(&plain).expect("a filtered scan qualifies");
        let names: Vec<String> = columns.iter().map(|&c| files.table_schema().field(c).name().clone()).collect();
        let output: Vec<String> = plain.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, output, "the scan's columns, by table index");
        assert!(names.contains(&"v".to_string()) && names.contains(&"s".to_string()), "{names:?}");
        let paths: Vec<&str> = files.files().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths.len(), 3, "{paths:?}");
        assert!(paths.windows(2).all(|w| w[0] < w[1]) && paths[0].ends_with("part-0.parquet"), "{paths:?}");
        assert!(files.files().iter().all(|f| f.size > 0 && f.modified > 0));
        let limited = scan_of(&ctx, "SELECT k FROM t LIMIT 5").await;
        assert!(ScanFiles::over(&limited).is_none(), "a limit reads only some rows");
        ctx.sql("SET datafusion.execution.parquet.pushdown_filters = true").await.unwrap();
        let pushed = scan_of(&ctx, "SELECT k FROM t WHERE v > 10").await;
        assert!(ScanFiles::over(&pushed).is_none(), "the scan filters its rows itself");
    }

    /// The pieces a load reads tile each file: cut into byte ranges of any size (smaller than a
    /// row group, a little larger, larger than the file), whatever ranges the plan cut, they read
    /// every row of the files once, in path order, as one scan of the whole files does.
    #[tokio::test]
    async fn load_pieces_read_every_row_of_the_files_once() {
        let seed = fresh_seed("load_pieces_read_every_row_of_the_files_once");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = ParquetDir::new("load-pieces");
        let mut first = 0i64;
        let mut expected: Vec<i64> = Vec::new();
        for f in 0..4 {
            let rows = rng.random_range(0..20_000i64);
            let group = rng.random_range(100..5_000usize);
            let batches = vec![kvs_batch(first, rows)];
            dir.write(&format!("part-{f}.parquet"), &batches, group);
            expected.extend(first..first + rows);
            first += rows;
        }
        let ctx = SessionContext::new();
        ctx.sql("SET datafusion.optimizer.repartition_file_min_size = 1").await.unwrap();
        let location = dir.location();
        ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{location}'")).await.unwrap();
        let plan = scan_of(&ctx, "SELECT k, s FROM t").await;
        let (files, columns) = ScanFiles::over(&plan).expect("a plain scan qualifies");
        let biggest = files.files().iter().map(|f| f.size).max().unwrap_or(1);
        for range_bytes in [997, 4096, biggest / 3 + 1, biggest, biggest * 2] {
            let pieces = files.load_pieces(range_bytes);
            for f in files.files().iter() {
                let path = f.path.rsplit('/').next().unwrap_or_default().to_string();
                let mut ranges: Vec<(u64, u64)> = pieces
                    .iter()
                    .filter(|p| p.object_meta.location.as_ref().ends_with(&path))
                    .map(|p| p.range.as_ref().map_or((0, f.size), |r| (r.start as u64, r.end as u64)))
                    .collect();
                ranges.sort();
                assert_eq!(ranges.first().map(|r| r.0), Some(0), "{path} at {range_bytes}: {ranges:?}");
                assert_eq!(ranges.last().map(|r| r.1), Some(f.size), "{path} at {range_bytes}: {ranges:?}");
                assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0), "{path} at {range_bytes}: {ranges:?}");
            }
            let builder = files.load_config(&columns).unwrap();
            let mut keys: Vec<i64> = Vec::new();
            for piece in pieces {
                let scan = DataSourceExec::from_data_source(files.piece_scan(&builder, piece));
                let batches: Vec<_> = scan.execute(0, ctx.task_ctx()).unwrap().try_collect().await.unwrap();
                for b in batches {
                    let k = b.column(0).as_any().downcast_ref::<Int64Array>().expect("k is Int64");
                    assert_eq!(k.null_count(), 0);
                    keys.extend(k.values().iter());
                }
            }
            assert_eq!(keys.len(), expected.len(), "rows at ranges of {range_bytes} bytes (seed {seed})");
            assert!(keys == expected, "each row once, in file order, at ranges of {range_bytes} bytes (seed {seed})");
        }
    }
}
