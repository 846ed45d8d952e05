//! Registering the extension: the `gpu.` options and the optimizer rule, on a
//! `SessionStateBuilder` or a `SessionConfig`.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{TableFunction, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::plan_err;
use datafusion::datasource::MemTable;
use datafusion::error::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::columns::cache::TableCache;
use crate::config::GpuConfig;
use crate::rule::GpuOptimizerRule;

/// Adds the GPU extension to a session builder.
pub trait SessionStateBuilderGpuExt {
    /// Registers the `gpu.` options (defaults unless already set), the GPU optimizer rule and
    /// the table function `gpu_table_cache()`.
    fn with_gpu(self) -> Self;
}

impl SessionStateBuilderGpuExt for SessionStateBuilder {
    fn with_gpu(mut self) -> Self {
        let config = self.config().take().unwrap_or_default();
        *self.config() = Some(with_gpu_options(config));
        let cache = TableFunction::new(TABLE_CACHE_FUNCTION.to_string(), Arc::new(TableCacheFunction));
        self.table_functions()
            .get_or_insert_with(Default::default)
            .insert(TABLE_CACHE_FUNCTION.to_string(), Arc::new(cache));
        self.with_physical_optimizer_rule(Arc::new(GpuOptimizerRule::new()))
    }
}

/// The name of [`TableCacheFunction`] in SQL.
pub const TABLE_CACHE_FUNCTION: &str = "gpu_table_cache";

/// `SELECT * FROM gpu_table_cache()`: a row per device whose table cache (`gpu.table_cache`) was
/// used, with the columns it holds, their device bytes, and its hits, misses, evictions and
/// refusals (columns larger than the limit alone) since the process started.
#[derive(Debug)]
pub struct TableCacheFunction;

impl TableFunctionImpl for TableCacheFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("{TABLE_CACHE_FUNCTION}() takes no arguments");
        }
        let names = ["device", "columns", "bytes", "hits", "misses", "evictions", "refused"];
        let schema =
            Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::UInt64, false)).collect::<Vec<_>>()));
        let rows: Vec<[u64; 7]> = TableCache::all()
            .into_iter()
            .map(|(device, cache)| {
                let s = cache.stats();
                [device as u64, s.entries as u64, s.bytes, s.hits, s.misses, s.evictions, s.refused]
            })
            .collect();
        let columns: Vec<ArrayRef> = (0..names.len())
            .map(|i| Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r[i]))) as ArrayRef)
            .collect();
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

/// `config` with the `gpu.` options registered (kept if already there).
pub fn with_gpu_options(mut config: SessionConfig) -> SessionConfig {
    if config.options().extensions.get::<GpuConfig>().is_none() {
        config.options_mut().extensions.insert(GpuConfig::default());
    }
    config
}

/// A `SessionContext` with DataFusion's defaults and the GPU extension.
pub fn gpu_session_context(config: SessionConfig) -> SessionContext {
    let state = SessionStateBuilder::new().with_config(config).with_default_features().with_gpu().build();
    SessionContext::new_with_state(state)
}

#[cfg(test)]
mod tests {
    /// The README's example (with `crate::` for `datafusion_gpu::`), plus assertions.
    #[tokio::test]
    async fn readme_example_registers_the_rule_and_options() {
        let _g = crate::testing::gpu_lock();
        use crate::SessionStateBuilderGpuExt;
        use datafusion::execution::SessionStateBuilder;
        use datafusion::prelude::SessionContext;

        let state = SessionStateBuilder::new().with_default_features().with_gpu().build();
        let ctx = SessionContext::new_with_state(state);
        ctx.sql("SET gpu.cost.min_rows = 1000").await.unwrap().collect().await.unwrap();

        let state = ctx.state();
        assert!(state.physical_optimizers().iter().any(|r| r.name() == "gpu"));
        let cfg = crate::GpuConfig::from_options(state.config_options());
        assert_eq!(cfg.min_rows, 1000);
        // The table cache's function answers with or without a device (no row without one).
        let cache = ctx.sql("SELECT * FROM gpu_table_cache()").await.unwrap();
        assert_eq!(cache.schema().fields().len(), 7);
        cache.collect().await.unwrap();
        assert!(ctx.sql("SELECT * FROM gpu_table_cache(1)").await.is_err());
    }
}
