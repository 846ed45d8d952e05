//! Registering the extension: the `gpu.` options and the optimizer rule, on a
//! `SessionStateBuilder` or a `SessionConfig`.

use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::config::GpuConfig;
use crate::exec::cache_functions;
use crate::rule::GpuOptimizerRule;

/// Adds the GPU extension to a session builder.
pub trait SessionStateBuilderGpuExt {
    /// Registers the `gpu.` options (defaults unless already set), the GPU optimizer rule and
    /// the table cache's SQL functions `gpu_cache('t')`, `gpu_uncache('t')` and
    /// `gpu_table_cache()` ([`crate::exec::cache_functions`]).
    fn with_gpu(self) -> Self;
}

impl SessionStateBuilderGpuExt for SessionStateBuilder {
    fn with_gpu(mut self) -> Self {
        let config = self.config().take().unwrap_or_default();
        *self.config() = Some(with_gpu_options(config));
        let functions = self.table_functions().get_or_insert_with(Default::default);
        for f in cache_functions::table_functions() {
            functions.insert(f.name().to_string(), f);
        }
        self.with_physical_optimizer_rule(Arc::new(GpuOptimizerRule::new()))
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
        assert_eq!(cache.schema().fields().len(), 12);
        cache.collect().await.unwrap();
        assert!(ctx.sql("SELECT * FROM gpu_table_cache(1)").await.is_err());
        let columns = ctx.sql("SELECT * FROM gpu_table_cache_columns()").await.unwrap();
        assert_eq!(columns.schema().fields().len(), 10);
        columns.collect().await.unwrap();
        assert!(ctx.sql("SELECT * FROM gpu_table_cache_columns(1)").await.is_err());
    }

    /// `gpu_cache('t')` replaces `t` by a GpuCachedTable of its rows when the query runs (not
    /// when it is planned), queries over it give the same answers, and `gpu_uncache('t')` puts
    /// the original back; wrong calls are refused with the usage. (Without a device the cached
    /// table's scans read the host batches.)
    #[tokio::test]
    async fn gpu_cache_replaces_a_table_and_gpu_uncache_restores_it() {
        use std::sync::Arc;

        use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::arrow::record_batch::RecordBatch;
        use datafusion::datasource::MemTable;

        use crate::exec::GpuCachedTable;
        use crate::testing::sorted_rows;

        let _g = crate::testing::gpu_lock();
        let ctx = super::gpu_session_context(datafusion::prelude::SessionConfig::new());
        // (`q` has a host image, 1 byte a row; `k` has nulls and `s` is Utf8: none.)
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("q", DataType::Int32, false),
        ]));
        let batch = |from: i64| {
            let k = Int64Array::from_iter((from..from + 50).map(|v| (v % 7 != 0).then_some(v % 13)));
            let s = StringArray::from_iter((from..from + 50).map(|v| (v % 5 != 0).then(|| format!("s{}", v % 3))));
            let q = Int32Array::from_iter_values((from..from + 50).map(|v| (v % 50) as i32));
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(k), Arc::new(s), Arc::new(q)]).unwrap()
        };
        let parts = vec![vec![batch(0), batch(50)], vec![batch(100)], vec![]];
        ctx.register_table("t", Arc::new(MemTable::try_new(Arc::clone(&schema), parts).unwrap())).unwrap();
        let query = "SELECT s, count(*), sum(k) FROM t GROUP BY s";
        let run = |sql: &'static str| {
            let ctx = ctx.clone();
            async move { sorted_rows(&ctx.sql(sql).await.unwrap().collect().await.unwrap()) }
        };
        let is_cached = || async {
            let t = ctx.table_provider("t").await.unwrap();
            (t.as_ref() as &dyn std::any::Any).downcast_ref::<GpuCachedTable>().is_some()
        };
        let want = run(query).await;
        // Planning (EXPLAIN) caches nothing.
        ctx.sql("EXPLAIN SELECT * FROM gpu_cache('t')").await.unwrap().collect().await.unwrap();
        assert!(!is_cached().await);
        let answer = run("SELECT * FROM gpu_cache('t')").await;
        assert_eq!(answer.len(), 1, "{answer:?}");
        assert!(answer[0].starts_with("t|150|3|") && answer[0].ends_with("|cached"), "{answer:?}");
        // table|rows|partitions|host_bytes|image_bytes|pinned_image_bytes|status: the image holds
        // q's 150 bytes, in page-locked memory where a device opens.
        let field = |i: usize| -> u64 { answer[0].split('|').nth(i).and_then(|b| b.parse().ok()).unwrap_or_default() };
        assert_eq!(field(4), 150, "{answer:?}");
        let device = crate::device::probe::device_count().is_ok_and(|n| n > 0);
        assert_eq!(field(5), if device { 150 } else { 0 }, "{answer:?}");
        assert!(is_cached().await);
        assert_eq!(run(query).await, want);
        // The cached scan is not wrapped in DataFusion's CooperativeExec (it is cooperative
        // itself): a GPU parent would see the wrapper, not the scan, and upload its host batches.
        // (One partition, one target partition: the aggregate reads the scan itself.)
        let one = super::gpu_session_context(datafusion::prelude::SessionConfig::new().with_target_partitions(1));
        let single = GpuCachedTable::try_new(Arc::clone(&schema), vec![vec![batch(0)]]).unwrap();
        one.register_table("u", Arc::new(single)).unwrap();
        let plan = one.sql("SELECT sum(k) FROM u").await.unwrap().create_physical_plan().await.unwrap();
        let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
        assert!(shown.contains("GpuCachedScanExec") && !shown.contains("CooperativeExec"), "{shown}");
        let again = run("SELECT table, status FROM gpu_cache('t')").await;
        assert_eq!(again, vec!["t|already cached".to_string()]);
        assert_eq!(run("SELECT * FROM gpu_uncache('t')").await, vec!["t|restored".to_string()]);
        assert!(!is_cached().await);
        assert_eq!(run(query).await, want);
        assert_eq!(run("SELECT * FROM gpu_uncache('t')").await, vec!["t|not cached".to_string()]);
        for wrong in ["SELECT * FROM gpu_cache(t)", "SELECT * FROM gpu_cache()", "SELECT * FROM gpu_cache('nope')"] {
            let err = match ctx.sql(wrong).await {
                Ok(df) => df.collect().await.unwrap_err().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(err.contains("gpu_cache"), "{wrong}: {err}");
        }
    }

    /// `gpu_cache` keeps a table in as many partitions as the session's target: a single Parquet
    /// file is read in byte ranges, as DataFusion's planner splits its scans, and the batches of
    /// an in-memory table of one partition are dealt out; the answers stay the same.
    #[tokio::test]
    async fn gpu_cache_keeps_the_target_partitions() {
        use crate::testing::sorted_rows;

        let _g = crate::testing::gpu_lock();
        let ctx = super::gpu_session_context(datafusion::prelude::SessionConfig::new().with_target_partitions(4));
        let run = |sql: String| {
            let ctx = ctx.clone();
            async move { sorted_rows(&ctx.sql(&sql).await.unwrap().collect().await.unwrap()) }
        };
        let dir = std::env::temp_dir().join(format!("dfg-cache-partitions-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.parquet");
        let rows = "SELECT value AS k, value % 7 AS g FROM generate_series(1, 200000)";
        run("SET datafusion.optimizer.repartition_file_min_size = 0".into()).await;
        run(format!(
            "COPY ({rows}) TO '{}' STORED AS PARQUET OPTIONS ('format.max_row_group_size' '10000')",
            file.display()
        ))
        .await;
        run(format!("CREATE EXTERNAL TABLE p STORED AS PARQUET LOCATION '{}'", file.display())).await;
        run(format!("CREATE TABLE m AS {rows}")).await;
        let query = |t: &str| format!("SELECT g, count(*), sum(k) FROM {t} GROUP BY g");
        let want = run(query("p")).await;
        assert_eq!(run(query("m")).await, want);
        for t in ["p", "m"] {
            let answer = run(format!("SELECT table, rows, partitions FROM gpu_cache('{t}')")).await;
            assert_eq!(answer, vec![format!("{t}|200000|4")], "{t}");
            assert_eq!(run(query(t)).await, want, "{t}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
