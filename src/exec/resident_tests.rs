//! GPU tests of tables resident in device memory: every query over [`ResidentTable`]s gives
//! DataFusion's answer over the same rows in memory, the GPU operators read the resident
//! columns without uploading them, and CPU operators read the host batches the tables were made
//! from, or (without them) the device columns downloaded.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::resident::ResidentTable;
use crate::config::GpuConfig;
use crate::cost::PlacementSetting;
use crate::exec::metric_total;
use crate::session::gpu_session_context;
use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip, sorted_rows};

pub(super) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("g", DataType::Int32, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("d", DataType::Decimal128(15, 2), true),
        Field::new("t", DataType::Date32, false),
    ]))
}

/// `parts` partitions of random rows (duplicate and NULL keys, skewed groups, strings, decimals,
/// dates), the last partition empty; each partition in batches of uneven sizes.
pub(super) fn partitions(rng: &mut StdRng, rows: usize, parts: usize, keys: i64) -> Vec<Vec<RecordBatch>> {
    let schema = schema();
    let mut out: Vec<Vec<RecordBatch>> = (0..parts - 1)
        .map(|_| {
            let mut left = rows / (parts - 1);
            let mut batches = Vec::new();
            while left > 0 {
                let n = rng.random_range(1..=left.min(700));
                left -= n;
                let k: Int64Array =
                    (0..n).map(|_| (rng.random_range(0..12) > 0).then(|| rng.random_range(0..keys))).collect();
                // Skew: a third of the rows in group 0.
                let g: Int32Array =
                    (0..n).map(|_| if rng.random_range(0..3) == 0 { 0 } else { rng.random_range(0..40) }).collect();
                let s: StringArray = (0..n)
                    .map(|_| (rng.random_range(0..9) > 0).then(|| format!("s{}", rng.random_range(0..60))))
                    .collect();
                let d = Decimal128Array::from(
                    (0..n)
                        .map(|_| (rng.random_range(0..10) > 0).then(|| rng.random_range(-100_000i128..100_000)))
                        .collect::<Vec<_>>(),
                )
                .with_precision_and_scale(15, 2)
                .unwrap();
                let t: Date32Array = (0..n).map(|_| Some(rng.random_range(9000..9400))).collect();
                let cols: Vec<ArrayRef> = vec![Arc::new(k), Arc::new(g), Arc::new(s), Arc::new(d), Arc::new(t)];
                batches.push(RecordBatch::try_new(Arc::clone(&schema), cols).unwrap());
            }
            batches
        })
        .collect();
    out.push(Vec::new());
    out
}

/// The query's result as sorted text (the comparison ignores row order), and its plan.
pub(super) async fn rows(ctx: &SessionContext, sql: &str) -> (Vec<String>, Arc<dyn ExecutionPlan>) {
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    (sorted_rows(&batches), plan)
}

pub(super) const QUERIES: &[&str] = &[
    "SELECT count(*) FROM a",
    "SELECT count(*), count(s), sum(g) FROM a WHERE k > 100",
    "SELECT k, g, s, d, t FROM a",
    "SELECT s, t FROM b WHERE g = 0 AND d > 10",
    "SELECT g, count(*), sum(d), min(k) FROM a GROUP BY g",
    "SELECT g, count(DISTINCT k), avg(d) FROM b GROUP BY g",
    "SELECT t, max(s), count(*) FROM a GROUP BY t",
    "SELECT s, sum(d) FROM b WHERE t < DATE '1995-01-01' GROUP BY s",
    "SELECT a.k, a.g, b.s FROM a JOIN b ON a.k = b.k WHERE b.g < 20",
    "SELECT a.k, b.d FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT a.s, b.s FROM a RIGHT JOIN b ON a.k = b.k AND a.g = b.g",
    "SELECT a.k, b.k FROM a FULL JOIN b ON a.k = b.k AND a.g < b.g",
    "SELECT k, s FROM a WHERE k IN (SELECT k FROM b WHERE g > 30)",
    "SELECT k, g FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
    "SELECT b.g, count(*), sum(a.d) FROM a JOIN b ON a.k = b.k GROUP BY b.g",
    // SSB q2's shape: a join's output on the build side, a filtered table on the probe side.
    "SELECT a.g, c.s, count(*), sum(a.d) FROM a JOIN b ON a.k = b.k JOIN (SELECT k, s FROM b WHERE g = 3) c ON b.k = c.k GROUP BY a.g, c.s",
    // TPC-H q18's shape: a join over a join and a grouped subquery.
    "SELECT a.g, count(*), sum(b.d) FROM a JOIN b ON a.k = b.k WHERE a.k IN (SELECT k FROM b GROUP BY k HAVING count(*) > 12) GROUP BY a.g",
    "SELECT g, k, row_number() OVER (PARTITION BY g ORDER BY k, s, d, t) FROM a WHERE k < 20",
    "SELECT s FROM b ORDER BY s NULLS FIRST LIMIT 7",
];

/// Every query gives DataFusion's answer with the tables resident on the GPU, as the rule
/// places its operators (every eligible one on the GPU, then the cost model), and the joins
/// and aggregates over the resident scans read them on the device.
#[test]
fn gpu_resident_tables_give_datafusions_answers() {
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip("gpu_resident_tables_give_datafusions_answers") else { return };
    let seed = fresh_seed("gpu_resident_tables_give_datafusions_answers");
    let mut rng = StdRng::seed_from_u64(seed);
    let a = partitions(&mut rng, 3000, 4, 500);
    let b = partitions(&mut rng, 9000, 5, 700);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = SessionConfig::new().with_target_partitions(4);
    let cpu = SessionContext::new_with_config(config.clone());
    for (name, parts) in [("a", &a), ("b", &b)] {
        cpu.register_table(name, Arc::new(MemTable::try_new(schema(), parts.clone()).unwrap())).unwrap();
    }
    // CPU operators read the tables' host batches, or (without them) their device columns downloaded.
    for (placement, host_copy) in
        [(PlacementSetting::Always, true), (PlacementSetting::Always, false), (PlacementSetting::Cost, true)]
    {
        let cfg =
            GpuConfig { min_rows: 0, placement, batch_rows: 1000, join_window_rows: 1000, ..GpuConfig::default() };
        let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
        for (name, parts) in [("a", &a), ("b", &b)] {
            // Device batches of 1,000 rows: several per partition, cut across host batches.
            let t = ResidentTable::try_new(Arc::clone(&gpu), schema(), parts, 1000).unwrap();
            assert_eq!(t.num_rows(), parts.iter().flatten().map(RecordBatch::num_rows).sum::<usize>());
            assert!(t.device_bytes() > 0);
            let t = if host_copy { t } else { t.without_host_copy() };
            assert_eq!(t.has_host_copy(), host_copy);
            ctx.register_table(name, Arc::new(t)).unwrap();
        }
        rt.block_on(async {
            for sql in QUERIES {
                let (want, _) = rows(&cpu, sql).await;
                let (got, plan) = rows(&ctx, sql).await;
                let shown = displayable(plan.as_ref()).indent(true).to_string();
                assert_eq!(got, want, "{placement:?}, host copy {host_copy}, seed {seed}: {sql}\n{shown}");
                // (A count DataFusion answers from the table's exact statistics scans nothing.)
                if !shown.contains("PlaceholderRowExec") {
                    assert!(shown.contains("GpuTableScanExec"), "{sql}\n{shown}");
                }
                if placement == PlacementSetting::Always && sql.contains("JOIN") && !sql.contains("FULL") {
                    assert!(shown.contains("GpuHashJoinExec"), "{sql}\n{shown}");
                }
                // A GPU aggregate straight over a resident scan reads its columns on the device:
                // it uploads nothing. (Where a CPU operator stands between a scan and a GPU
                // operator, that operator's output is uploaded; the time is printed.)
                let direct = direct_readers(&plan);
                eprintln!(
                    "{placement:?}: {} ns of uploads; over the scans: {direct:?}: {sql}",
                    metric_total(&plan, None, "upload_time")
                );
                for (name, ns) in &direct {
                    assert_eq!(*ns, 0, "{sql}: {name} over a resident scan uploaded\n{shown}");
                }
                if placement == PlacementSetting::Always && sql.starts_with("SELECT g, count(*)") {
                    assert!(!direct.is_empty(), "{sql}: no GPU aggregate over the scan\n{shown}");
                }
            }
        });
    }
}

/// Nanoseconds `plan`'s own `upload_time` metrics add up to, each taken as it is
/// (`MetricsSet::sum_by_name` counts an unused timer as 1 ns).
fn own_upload_time(plan: &Arc<dyn ExecutionPlan>) -> usize {
    plan.metrics()
        .map_or(0, |m| m.iter().filter(|m| m.value().name() == "upload_time").map(|m| m.value().as_usize()).sum())
}

/// The GPU aggregates of `plan` whose input is a resident scan itself, with their upload time.
fn direct_readers(plan: &Arc<dyn ExecutionPlan>) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = plan.children().iter().flat_map(|c| direct_readers(c)).collect();
    let over_scan = matches!(plan.children().as_slice(), [c] if c.name() == "GpuTableScanExec");
    if plan.name() == "GpuAggregateExec" && over_scan {
        out.push((plan.name().to_string(), own_upload_time(plan)));
    }
    out
}

/// A session on another device than the table's is refused with the setting to change.
#[test]
fn gpu_a_resident_table_names_its_device() {
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip("gpu_a_resident_table_names_its_device") else { return };
    let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_a_resident_table_names_its_device"));
    let t = ResidentTable::try_new(Arc::clone(&gpu), schema(), &partitions(&mut rng, 100, 2, 10), 64).unwrap();
    let cfg = GpuConfig { device: gpu.info().ordinal + 1, ..GpuConfig::default() };
    let ctx = gpu_session_context(SessionConfig::new().with_option_extension(cfg));
    // The host batches it was made from answer a CPU read on any device.
    ctx.register_table("a", Arc::new(t.clone())).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rows = rt.block_on(async { ctx.sql("SELECT * FROM a").await.unwrap().collect().await }).unwrap();
    assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 100);
    // The device columns do not.
    ctx.deregister_table("a").unwrap();
    ctx.register_table("a", Arc::new(t.without_host_copy())).unwrap();
    let err = rt.block_on(async { ctx.sql("SELECT * FROM a").await.unwrap().collect().await }).unwrap_err().to_string();
    assert!(err.contains("gpu.device"), "{err}");
}
