//! [`GpuCachedTable`]: a `TableProvider` over host batches whose columns go to the device's table
//! cache ([`crate::columns::cache`]) when a GPU operator first reads them, and stay there for
//! later queries while the cache keeps them. It is the lazy counterpart of
//! [`super::ResidentTable`], which uploads every column when it is made and holds it: only the
//! columns queries read take device memory, and the cache may evict them (they are uploaded again
//! when next read).
//!
//! `gpu.table_cache` does the same for every in-memory table, but at the end of planning:
//! DataFusion has by then planned over the table's own scan, whose statistics it computes from
//! every batch each time a planner asks for them (about 30 ms a query over SF10's 8,192-row
//! batches). This table computes them once, when it is made, and its scan is the cached scan from
//! the start.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Statistics;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use super::cached_scan::{GpuCachedScanExec, ScanLayouts};
use super::{HostTable, registered_rows};
use crate::columns::is_supported;
use crate::config::GpuConfig;
use crate::device::{Gpu, PinnedPool};

/// A table of host batches read through the device's table cache (see the module's text).
#[derive(Debug, Clone)]
pub struct GpuCachedTable {
    schema: SchemaRef,
    partitions: Arc<Vec<Vec<RecordBatch>>>,
    /// Exact row counts, byte sizes and null counts per partition and overall, as DataFusion's
    /// in-memory table computes them.
    partition_statistics: Arc<Vec<Statistics>>,
    statistics: Arc<Statistics>,
    /// The provider whose rows these are, when the table replaced it (`gpu_cache('t')`), for
    /// `gpu_uncache('t')` to register again.
    replaced: Option<Arc<dyn TableProvider>>,
    /// How its partitions are grouped and cut into device batches and their columns keyed in the
    /// cache, for the `gpu.table_cache.batch_rows` of the last scan: shared by its scans (see
    /// [`ScanLayouts`]).
    layouts: Arc<Mutex<Option<Arc<ScanLayouts>>>>,
}

impl GpuCachedTable {
    /// The table of `partitions` (host batches of `schema`); nothing is uploaded yet.
    pub fn try_new(schema: SchemaRef, partitions: Vec<Vec<RecordBatch>>) -> Result<Self> {
        let HostTable { partition_statistics, statistics } = HostTable::check(&schema, &partitions, "cached table")?;
        Ok(GpuCachedTable {
            schema,
            partitions: Arc::new(partitions),
            partition_statistics: Arc::new(partition_statistics),
            statistics: Arc::new(statistics),
            replaced: None,
            layouts: Arc::new(Mutex::new(None)),
        })
    }

    /// The rows of table `name` registered in `ctx`, read with DataFusion (in as many
    /// partitions as its scan has) and held on the host; register the result under any name.
    pub async fn from_registered(ctx: &SessionContext, name: &str) -> Result<Self> {
        let (schema, partitions) = registered_rows(ctx, name).await?;
        GpuCachedTable::try_new(schema, partitions)
    }

    /// This table as the replacement of `provider`, whose rows it holds.
    pub fn replacing(self, provider: Arc<dyn TableProvider>) -> Self {
        GpuCachedTable { replaced: Some(provider), ..self }
    }

    /// The provider this table replaced, if it replaced one.
    pub fn replaced(&self) -> Option<&Arc<dyn TableProvider>> {
        self.replaced.as_ref()
    }

    pub fn num_rows(&self) -> usize {
        self.partitions.iter().flatten().map(RecordBatch::num_rows).sum()
    }

    pub fn num_partitions(&self) -> usize {
        self.partitions.len()
    }

    /// The layouts of its partitions read in device batches of `batch_rows` rows: the ones its
    /// earlier scans computed, unless those were for another `gpu.table_cache.batch_rows`.
    fn layouts(&self, batch_rows: usize) -> Arc<ScanLayouts> {
        let mut kept = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        match kept.as_ref() {
            Some(l) if l.cuts_by(batch_rows) => Arc::clone(l),
            _ => {
                let l = Arc::new(ScanLayouts::new(self.partitions.len(), batch_rows));
                *kept = Some(Arc::clone(&l));
                l
            }
        }
    }

    /// Host bytes the table's batches hold.
    pub fn host_bytes(&self) -> usize {
        self.partitions.iter().flatten().map(RecordBatch::get_array_memory_size).sum()
    }

    /// This table with a host image of each of its columns that has one, for scans in device
    /// batches of `batch_rows` rows (`gpu.table_cache.batch_rows`): integer and decimal columns
    /// narrowed to their own range, string columns as row lengths and bytes
    /// ([`crate::columns::image`]). A scan that uploads a column sends its image: a first query
    /// over a cold device cache reads and sends fewer bytes. The images are made now, on several
    /// threads, and cost host memory ([`GpuCachedTable::image_bytes`]); a scan with another
    /// `batch_rows` reads the arrays. `gpu.table_cache.host_image` makes them for `gpu_cache()`
    /// and the benchmarks.
    pub fn with_host_image(self, batch_rows: usize) -> Result<Self> {
        self.make_images(batch_rows, None)
    }

    /// [`GpuCachedTable::with_host_image`] in page-locked memory of `gpu`'s pool, within its
    /// `gpu.memory.pinned_limit`: an upload DMAs an image as it lies, without copying it into
    /// the staging buffers first, at the link's pinned speed. A column's image the pool has no
    /// room for stays in ordinary memory ([`GpuCachedTable::pinned_image_bytes`] tells).
    pub fn with_pinned_host_image(self, batch_rows: usize, gpu: &Gpu) -> Result<Self> {
        self.make_images(batch_rows, Some((gpu.pinned(), gpu.pinned_limit())))
    }

    fn make_images(self, batch_rows: usize, pin: Option<(&Arc<PinnedPool>, u64)>) -> Result<Self> {
        let columns: Vec<usize> =
            (0..self.schema.fields().len()).filter(|&c| is_supported(self.schema.field(c).data_type())).collect();
        self.layouts(batch_rows).make_images(&self.partitions, &columns, pin)?;
        Ok(self)
    }

    /// This table with its host image when `cfg` asks for one (`gpu.table_cache.host_image`),
    /// for its `gpu.table_cache.batch_rows`, pinned under `gpu.table_cache.host_image_pinned`
    /// when the session's device opens: as `gpu_cache()` and the benchmarks make it.
    pub fn with_configured_image(self, cfg: &GpuConfig) -> Result<Self> {
        if !cfg.table_cache_host_image {
            return Ok(self);
        }
        match cfg.table_cache_host_image_pinned.then(|| Gpu::for_config(cfg).ok()).flatten() {
            Some(gpu) => self.with_pinned_host_image(cfg.table_cache_batch_rows, &gpu),
            None => self.with_host_image(cfg.table_cache_batch_rows),
        }
    }

    /// Host bytes its columns' host images hold (0 without them, see
    /// [`GpuCachedTable::with_host_image`]).
    pub fn image_bytes(&self) -> usize {
        self.image_bytes_both().0
    }

    /// Of [`GpuCachedTable::image_bytes`], those in page-locked memory
    /// ([`GpuCachedTable::with_pinned_host_image`]).
    pub fn pinned_image_bytes(&self) -> usize {
        self.image_bytes_both().1
    }

    fn image_bytes_both(&self) -> (usize, usize) {
        self.layouts.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or((0, 0), |l| l.image_bytes())
    }
}

#[async_trait]
impl TableProvider for GpuCachedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns = projection.cloned().unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        // A column without a device layout is read by DataFusion's own scan.
        if columns.iter().any(|&c| self.schema.fields().get(c).is_none_or(|f| !is_supported(f.data_type()))) {
            return MemorySourceConfig::try_new_exec(&self.partitions, Arc::clone(&self.schema), Some(columns))
                .map(|e| e as Arc<dyn ExecutionPlan>);
        }
        let schema = Arc::new(self.schema.project(&columns)?);
        let mut statistics: HashMap<Option<usize>, Arc<Statistics>> = self
            .partition_statistics
            .iter()
            .enumerate()
            .map(|(p, s)| (Some(p), Arc::new(s.clone().project(Some(&columns)))))
            .collect();
        statistics.insert(None, Arc::new(self.statistics.as_ref().clone().project(Some(&columns))));
        let cfg = GpuConfig::from_options(state.config_options());
        let layouts = self.layouts(cfg.table_cache_batch_rows);
        Ok(Arc::new(GpuCachedScanExec::of_table(
            Arc::clone(&self.partitions),
            layouts,
            columns,
            schema,
            statistics,
            &cfg,
        )))
    }

    fn statistics(&self) -> Option<Statistics> {
        Some(self.statistics.as_ref().clone())
    }
}
