//! The table cache in SQL: four table functions that `with_gpu()` registers.
//!
//! - `SELECT * FROM gpu_cache('t')` reads registered table `t` with DataFusion (any provider:
//!   in memory, Parquet, CSV), holds its rows on the host and registers a [`GpuCachedTable`] of
//!   them under the same name, with a host image of its columns under
//!   `gpu.table_cache.host_image` ([`GpuCachedTable::with_host_image`]). Later queries read `t`'s
//!   columns through the device's table cache (uploaded when a GPU operator first reads them). The
//!   function answers one row: the table, its rows, partitions, host bytes, image bytes and those
//!   of them in page-locked memory (`gpu.table_cache.host_image_pinned`). Writes to `t`
//!   (`INSERT`, `DELETE`, `UPDATE`) go to the table it replaced, after which `t` reads its rows
//!   again; changes made to its files by others are not seen until `gpu_uncache('t')`, as with
//!   Spark's `CACHE TABLE`.
//! - `SELECT * FROM gpu_uncache('t')` registers the provider `gpu_cache` replaced again. The
//!   device copies of its columns age out of the cache.
//! - `SELECT * FROM gpu_table_cache()` shows each device's cache: columns, bytes, hits, misses,
//!   evictions, refusals, entries dropped because their tables changed or went away, and entries
//!   given up to make room for device memory, since the process started; and of its bytes, those
//!   of packed columns (`gpu.table_cache.compress`), what those would take at full width, and the
//!   full-width copies kept beside them.
//! - `SELECT * FROM gpu_table_cache_columns()` shows each cached column: its device, the file it
//!   was read from (`memory` for an in-memory table's), its name and type, rows, device bytes, of
//!   them those packed, what it takes at its Arrow width, how it is kept (`plain`, packed
//!   integers, `dictionary, 1-byte codes`) and whether a running query reads it;
//!   least recently used first.
//!
//! The work is done when the query runs, not when it is planned (an `EXPLAIN` caches nothing).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{
    SchemaProvider, Session, TableFunction, TableFunctionArgs, TableFunctionImpl, TableProvider,
};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{ScalarValue, TableReference, internal_err, plan_err};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PhysicalExpr, PlanProperties,
};

use super::cached_table::{GpuCachedTable, collect_for_cache, scan_for_cache};
use crate::columns::cache::{CachedColumnInfo, TableCache};
use crate::config::GpuConfig;

/// The SQL names of the functions.
pub const CACHE_FUNCTION: &str = "gpu_cache";
pub const UNCACHE_FUNCTION: &str = "gpu_uncache";
pub const TABLE_CACHE_FUNCTION: &str = "gpu_table_cache";
pub const TABLE_CACHE_COLUMNS_FUNCTION: &str = "gpu_table_cache_columns";

/// The three functions, as a session registers them.
pub fn table_functions() -> Vec<Arc<TableFunction>> {
    vec![
        Arc::new(TableFunction::new(CACHE_FUNCTION.to_string(), Arc::new(CacheFunction { uncache: false }))),
        Arc::new(TableFunction::new(UNCACHE_FUNCTION.to_string(), Arc::new(CacheFunction { uncache: true }))),
        Arc::new(TableFunction::new(TABLE_CACHE_FUNCTION.to_string(), Arc::new(TableCacheFunction))),
        Arc::new(TableFunction::new(TABLE_CACHE_COLUMNS_FUNCTION.to_string(), Arc::new(TableCacheColumnsFunction))),
    ]
}

/// `gpu_table_cache()` (see the module's text).
#[derive(Debug)]
pub struct TableCacheFunction;

impl TableFunctionImpl for TableCacheFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("{TABLE_CACHE_FUNCTION}() takes no arguments");
        }
        let names = [
            "device",
            "columns",
            "bytes",
            "hits",
            "misses",
            "evictions",
            "refused",
            "invalidated",
            "reclaimed",
            "packed_bytes",
            "packed_full_width_bytes",
            "full_width_copy_bytes",
        ];
        let schema =
            Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::UInt64, false)).collect::<Vec<_>>()));
        let rows: Vec<[u64; 12]> = TableCache::all()
            .into_iter()
            .map(|(device, cache)| {
                let s = cache.stats();
                [
                    device as u64,
                    s.entries as u64,
                    s.bytes,
                    s.hits,
                    s.misses,
                    s.evictions,
                    s.refused,
                    s.invalidated,
                    s.reclaimed,
                    s.packed_bytes,
                    s.packed_full_bytes,
                    s.wide_copy_bytes,
                ]
            })
            .collect();
        let columns: Vec<ArrayRef> = (0..names.len())
            .map(|i| Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r[i]))) as ArrayRef)
            .collect();
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

/// `gpu_table_cache_columns()` (see the module's text).
#[derive(Debug)]
pub struct TableCacheColumnsFunction;

impl TableFunctionImpl for TableCacheColumnsFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("{TABLE_CACHE_COLUMNS_FUNCTION}() takes no arguments");
        }
        let batch = table_cache_columns(&TableCache::all())?;
        Ok(Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]])?))
    }
}

/// The rows of `gpu_table_cache_columns()` for `caches` (by device ordinal).
fn table_cache_columns(caches: &[(usize, Arc<TableCache>)]) -> Result<RecordBatch> {
    let u64s = ["rows", "bytes", "packed_bytes", "full_width_bytes"];
    let mut fields = vec![
        Field::new("device", DataType::UInt64, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("column", DataType::Utf8, false),
        Field::new("data_type", DataType::Utf8, false),
    ];
    fields.extend(u64s.iter().map(|n| Field::new(*n, DataType::UInt64, false)));
    fields.push(Field::new("encoding", DataType::Utf8, false));
    fields.push(Field::new("read", DataType::Boolean, false));
    let all: Vec<(usize, CachedColumnInfo)> =
        caches.iter().flat_map(|(d, c)| c.columns().into_iter().map(|i| (*d, i))).collect();
    let strings = |f: &dyn Fn(&CachedColumnInfo) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(all.iter().map(|(_, i)| f(i))))
    };
    let numbers = |f: &dyn Fn(&CachedColumnInfo) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(all.iter().map(|(_, i)| f(i))))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(all.iter().map(|(d, _)| *d as u64))),
        strings(&|i| i.source.clone()),
        strings(&|i| i.column.clone()),
        strings(&|i| i.data_type.to_string()),
        numbers(&|i| i.rows),
        numbers(&|i| i.bytes),
        numbers(&|i| i.packed_bytes),
        numbers(&|i| i.full_width_bytes),
        strings(&|i| i.encoding.clone()),
        Arc::new(BooleanArray::from_iter(all.iter().map(|(_, i)| Some(i.read)))),
    ];
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

/// `gpu_cache('t')` or, with `uncache`, `gpu_uncache('t')`.
#[derive(Debug)]
struct CacheFunction {
    uncache: bool,
}

/// The SQL name of `gpu_cache`, or with `uncache` of `gpu_uncache`.
fn function_name(uncache: bool) -> &'static str {
    if uncache { UNCACHE_FUNCTION } else { CACHE_FUNCTION }
}

impl TableFunctionImpl for CacheFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let name = match args.exprs() {
            [Expr::Literal(ScalarValue::Utf8(Some(n)) | ScalarValue::Utf8View(Some(n)), _)] => n.clone(),
            _ => {
                return plan_err!(
                    "{}('table') takes the name of a registered table, in quotes",
                    function_name(self.uncache)
                );
            }
        };
        let Some(state) = args.session().as_any().downcast_ref::<SessionState>() else {
            return plan_err!("{}() needs a DataFusion SessionState", function_name(self.uncache));
        };
        let reference = TableReference::from(name.as_str());
        let schema = state.schema_for_ref(reference.clone())?;
        Ok(Arc::new(CacheCall { uncache: self.uncache, schema, table: reference.table().to_string(), written: name }))
    }
}

/// One call of `gpu_cache` or `gpu_uncache`: the table to act on, in its schema.
#[derive(Debug)]
struct CacheCall {
    uncache: bool,
    schema: Arc<dyn SchemaProvider>,
    /// The table's name in `schema`, and as the call wrote it.
    table: String,
    written: String,
}

/// The answer's columns.
fn answer_schema(uncache: bool) -> SchemaRef {
    let mut fields = vec![Field::new("table", DataType::Utf8, false)];
    if !uncache {
        for n in ["rows", "partitions", "host_bytes", "image_bytes", "pinned_image_bytes"] {
            fields.push(Field::new(n, DataType::UInt64, false));
        }
    }
    fields.push(Field::new("status", DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

#[async_trait]
impl TableProvider for CacheCall {
    fn schema(&self) -> SchemaRef {
        answer_schema(self.uncache)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(provider) = self.schema.table(&self.table).await? else {
            return plan_err!("{}: no table named '{}'", function_name(self.uncache), self.written);
        };
        let cached = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<GpuCachedTable>().cloned();
        let action = match (self.uncache, cached) {
            (false, Some(table)) => Action::AlreadyCached(table),
            (false, None) => {
                // The cached table's partitions are its later scans'.
                let input = scan_for_cache(&provider, state).await?;
                Action::Cache { provider, input }
            }
            (true, cached) => Action::Uncache(cached),
        };
        let schema = answer_schema(self.uncache);
        let projection = projection.cloned().unwrap_or_else(|| (0..schema.fields().len()).collect());
        let output = Arc::new(schema.project(&projection)?);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&output)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(Arc::new(GpuCacheTableExec {
            action,
            schema: Arc::clone(&self.schema),
            table: self.table.clone(),
            projection,
            output,
            properties,
        }))
    }
}

/// What a call does when it runs.
#[derive(Debug, Clone)]
enum Action {
    /// Read the provider's rows with its scan `input` and register them as a `GpuCachedTable`.
    Cache {
        provider: Arc<dyn TableProvider>,
        input: Arc<dyn ExecutionPlan>,
    },
    AlreadyCached(GpuCachedTable),
    /// Register again the provider the cached table replaced (`None`: the table is not one).
    Uncache(Option<GpuCachedTable>),
}

/// The plan of a `gpu_cache` or `gpu_uncache` call: one partition, one row.
#[derive(Debug)]
pub struct GpuCacheTableExec {
    action: Action,
    schema: Arc<dyn SchemaProvider>,
    table: String,
    /// Columns of the answer, in output order.
    projection: Vec<usize>,
    output: SchemaRef,
    properties: Arc<PlanProperties>,
}

/// The row of a cached table: name, rows, partitions, host bytes of its batches and of its host
/// image, status.
fn cached_row(table: &str, cached: &GpuCachedTable, status: &str) -> Vec<ArrayRef> {
    vec![
        Arc::new(StringArray::from(vec![table.to_string()])),
        Arc::new(UInt64Array::from(vec![cached.num_rows() as u64])),
        Arc::new(UInt64Array::from(vec![cached.num_partitions() as u64])),
        Arc::new(UInt64Array::from(vec![cached.host_bytes() as u64])),
        Arc::new(UInt64Array::from(vec![cached.image_bytes() as u64])),
        Arc::new(UInt64Array::from(vec![cached.pinned_image_bytes() as u64])),
        Arc::new(StringArray::from(vec![status.to_string()])),
    ]
}

/// `table` in `schema` replaced by `provider`.
fn replace(schema: &Arc<dyn SchemaProvider>, table: &str, provider: Arc<dyn TableProvider>) -> Result<()> {
    schema.deregister_table(table)?;
    schema.register_table(table.to_string(), provider)?;
    Ok(())
}

impl GpuCacheTableExec {
    /// Does the call's work; its answer's columns.
    async fn run(
        action: Action,
        schema: Arc<dyn SchemaProvider>,
        table: String,
        ctx: Arc<TaskContext>,
    ) -> Result<Vec<ArrayRef>> {
        let one = |s: &str| Arc::new(StringArray::from(vec![s.to_string()])) as ArrayRef;
        Ok(match action {
            Action::Cache { provider, input } => {
                let cfg = GpuConfig::from_options(ctx.session_config().options());
                let partitions = collect_for_cache(input, ctx).await?;
                let cached = GpuCachedTable::try_new(provider.schema(), partitions)?.replacing(provider);
                // Made off the async runtime's threads: an image reads every column.
                let cached = super::blocking(move || cached.with_configured_image(&cfg)).await?;
                replace(&schema, &table, Arc::new(cached.clone()))?;
                cached_row(&table, &cached, "cached")
            }
            Action::AlreadyCached(cached) => cached_row(&table, &cached, "already cached"),
            Action::Uncache(Some(cached)) => match cached.replaced() {
                Some(original) => {
                    replace(&schema, &table, Arc::clone(original))?;
                    vec![one(&table), one("restored")]
                }
                None => vec![one(&table), one("not restored: made as a GpuCachedTable, it replaced no table")],
            },
            Action::Uncache(None) => vec![one(&table), one("not cached")],
        })
    }
}

impl DisplayAs for GpuCacheTableExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let what = match &self.action {
            Action::Cache { input, .. } => format!("caches through the device's table cache, reading {}", input.name()),
            Action::AlreadyCached(_) => "already cached".to_string(),
            Action::Uncache(_) => "restores the table the cache replaced".to_string(),
        };
        write!(f, "GpuCacheTableExec: table={}, {what}", self.table)
    }
}

impl ExecutionPlan for GpuCacheTableExec {
    fn name(&self) -> &str {
        "GpuCacheTableExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("GpuCacheTableExec has no children");
        }
        Ok(self)
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("GpuCacheTableExec has one partition, not {partition}");
        }
        let uncache = matches!(self.action, Action::Uncache(_));
        let (action, schema, table) = (self.action.clone(), Arc::clone(&self.schema), self.table.clone());
        let (projection, output) = (self.projection.clone(), Arc::clone(&self.output));
        let answer = futures::stream::once(async move {
            let columns = GpuCacheTableExec::run(action, schema, table, context).await?;
            let batch = RecordBatch::try_new(answer_schema(uncache), columns)?;
            batch.project(&projection).map_err(DataFusionError::from)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(output, answer)))
    }
}
