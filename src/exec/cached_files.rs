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
//! column is loaded by DataFusion's Parquet reader one piece (a file, or a byte range of one, as
//! the plan cut them) a task, several at once, each piece uploaded as soon as it is decoded and
//! its host batches then dropped: the host holds a few pieces at a time, never the table. The
//! pieces are joined on the device in a fixed order (by path, then byte range), so every column
//! of a file set lies in the same row order whenever it was loaded.

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

use super::blocking;
use super::cached_layouts::{CacheTerms, Loaded, device_partitions, pack_for_cache};
use crate::columns::cache::{ColumnKey, FileVersion, TableCache};
use crate::columns::{DeviceBatch, DeviceColumn, is_supported};
use crate::device::Gpu;
use crate::error::gpu_error;

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

    /// Table columns `columns` of every file as device batches of `schema` (those columns), of up
    /// to `batch_rows` rows each (a piece of more rows than that stands alone), joined in piece
    /// order; every piece decoded on a task of its own, at most one a core at once, and uploaded
    /// as it is decoded. The batches' work is complete when they are returned.
    pub(crate) async fn load(
        &self,
        columns: &[usize],
        schema: SchemaRef,
        gpu: &Arc<Gpu>,
        context: Arc<TaskContext>,
        batch_rows: usize,
    ) -> Result<Vec<DeviceBatch>> {
        let builder = FileScanConfigBuilder::from(self.config.clone())
            .with_source(Arc::new(self.source.clone()))
            .with_limit(None)
            .with_output_ordering(Vec::new())
            .with_output_partitioning(None)
            .with_projection_indices(Some(columns.to_vec()))?;
        let at_once = std::thread::available_parallelism().map_or(4, |n| n.get());
        let parts: Vec<Option<DeviceBatch>> = futures::stream::iter(self.pieces.iter().cloned())
            .map(|piece| {
                let config = builder.clone().with_file_groups(vec![FileGroup::new(vec![piece])]).build();
                let task = SpawnedTask::spawn(load_piece(config, Arc::clone(gpu), Arc::clone(&context)));
                async move {
                    task.join()
                        .await
                        .map_err(|e| DataFusionError::Execution(format!("GPU: loading a Parquet file failed: {e}")))?
                }
            })
            .buffered(at_once)
            .try_collect()
            .await?;
        let parts: Vec<DeviceBatch> = parts.into_iter().flatten().collect();
        let gpu = Arc::clone(gpu);
        blocking(move || {
            let rows: Vec<usize> = parts.iter().map(DeviceBatch::num_rows).collect();
            let stream = gpu.stream();
            let mut parts = parts.into_iter();
            let batches = device_partitions(&rows, batch_rows)
                .into_iter()
                .map(|group| {
                    let group: Vec<DeviceBatch> = parts.by_ref().take(group.len()).collect();
                    DeviceBatch::concat(&gpu, &stream, Arc::clone(&schema), &group)
                })
                .collect::<Result<Vec<_>>>()?;
            stream.synchronize().map_err(|e| gpu_error(format!("joining a Parquet table's pieces: {e}")))?;
            Ok(batches)
        })
        .await
    }
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
    /// The device batches of table columns `columns` (as `schema`): each column from the cache,
    /// or loaded from the files (all the missing ones together) and offered to it. Columns found
    /// cut otherwise than the others (the same files read in other pieces) are loaded again with
    /// the rest.
    pub(crate) async fn columns(
        &self,
        columns: &[usize],
        schema: &SchemaRef,
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
        let rows_of = |chunks: &Vec<Arc<DeviceColumn>>| chunks.iter().map(|c| c.len).collect::<Vec<usize>>();
        let mut found: Vec<Option<Vec<Arc<DeviceColumn>>>> = self.cache.read(&keys, self.gpu, self.terms.limit)?;
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
            let loaded_cut: Vec<usize> = loaded.iter().map(DeviceBatch::num_rows).collect();
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
            uploaded_bytes = loaded.iter().map(DeviceBatch::byte_size).sum();
            let by_column: Vec<Vec<Arc<DeviceColumn>>> =
                (0..missing.len()).map(|j| loaded.iter().map(|b| Arc::clone(&b.columns()[j])).collect()).collect();
            let (gpu, terms) = (Arc::clone(self.gpu), self.terms);
            let (by_column, packed) = blocking(move || {
                let packed = pack_for_cache(&gpu, &gpu.stream(), terms, &by_column)?;
                Ok((by_column, packed))
            })
            .await?;
            for ((&c, chunks), packed) in missing.iter().zip(by_column).zip(packed) {
                for (i, _) in columns.iter().enumerate().filter(|(_, col)| **col == c) {
                    found[i] = Some(chunks.clone());
                }
                if let Some(key) = columns.iter().position(|col| *col == c).map(|i| keys[i].clone()) {
                    self.cache.insert_packed(key, chunks, packed, None, self.terms.limit);
                }
            }
        }
        let found: Vec<Vec<Arc<DeviceColumn>>> = found
            .into_iter()
            .map(|f| f.ok_or_else(|| gpu_error("a cached scan of files lost a column it loaded")))
            .collect::<Result<_>>()?;
        let chunks = found.first().map_or(0, Vec::len);
        let batches = (0..chunks)
            .map(|i| {
                let cols: Vec<Arc<DeviceColumn>> = found.iter().map(|c| Arc::clone(&c[i])).collect();
                let rows = cols.first().map_or(0, |c| c.len);
                // Every column's work is complete: its consumers may work on a stream of their own.
                DeviceBatch::try_new(Arc::clone(schema), cols, rows, Arc::clone(self.gpu), self.gpu.stream())
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Loaded { batches, hits, misses, uploaded_bytes })
    }

    /// Table columns `columns` of every file, loaded (see [`ScanFiles::load`]).
    async fn load(&self, columns: &[usize], table: &SchemaRef, context: Arc<TaskContext>) -> Result<Vec<DeviceBatch>> {
        let schema = Arc::new(table.project(columns)?);
        crate::timeline::mark("cached scan", || format!("loading {} columns from the files", columns.len()));
        self.files.load(columns, schema, self.gpu, context, self.batch_rows).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::prelude::SessionContext;

    use super::ScanFiles;
    use crate::testing::{ParquetDir, kvs_batch};

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
}
