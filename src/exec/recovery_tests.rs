//! GPU tests of running out of device memory: with requests refused at chosen points (see
//! [`crate::device::MemoryBudget::fail_after`]), every query still gives DataFusion's answer,
//! and the metrics say which part of the work DataFusion's operators did: a join's build
//! (`cpu_fallbacks` of `GpuHashJoinExec`), a join partition's remaining probe rows (the same),
//! an aggregate partition (`cpu_fallbacks` of `GpuAggregateExec`), or the whole query
//! (`cpu_reruns` of `GpuQueryExec`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{SessionConfig, SessionContext};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::GpuConfig;
use crate::cost::PlacementSetting;
use crate::device::Gpu;
use crate::join::{JoinAlgorithm, JoinAlgorithmSetting};
use crate::session::gpu_session_context;
use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip, sorted_rows};

/// Two tables with duplicate and NULL keys: `a` (the smaller) and `b`, in 3 partitions each.
fn register(ctx: &SessionContext, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for (name, rows) in [("a", 3000usize), ("b", 7000)] {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let parts: Vec<Vec<RecordBatch>> = (0..3)
            .map(|_| {
                let n = rows / 3;
                let k: Int64Array =
                    (0..n).map(|_| (rng.random_range(0..10) > 0).then(|| rng.random_range(0..800))).collect();
                let v: Int64Array = (0..n).map(|_| rng.random_range(-1000..1000)).collect();
                let s: StringArray = (0..n)
                    .map(|_| (rng.random_range(0..8) > 0).then(|| format!("s{}", rng.random_range(0..50))))
                    .collect();
                let cols: Vec<ArrayRef> = vec![Arc::new(k), Arc::new(v), Arc::new(s)];
                vec![RecordBatch::try_new(Arc::clone(&schema), cols).unwrap()]
            })
            .collect();
        ctx.register_table(name, Arc::new(MemTable::try_new(schema, parts).unwrap())).unwrap();
    }
}

/// A session with every eligible operator on the GPU, in small probe chunks (several per
/// partition), and the tables.
fn gpu_ctx(seed: u64) -> SessionContext {
    let cfg = GpuConfig {
        min_rows: 0,
        placement: PlacementSetting::Always,
        join_algorithm: JoinAlgorithmSetting::Fixed(JoinAlgorithm::Npj),
        batch_rows: 256,
        join_window_rows: 256,
        // The probes of uploaded chunks (the table cache has tests of its own).
        table_cache: false,
        ..GpuConfig::default()
    };
    let ctx = gpu_session_context(SessionConfig::new().with_target_partitions(3).with_option_extension(cfg));
    register(&ctx, seed);
    ctx
}

fn cpu_ctx(seed: u64) -> SessionContext {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(3));
    register(&ctx, seed);
    ctx
}

/// The sum of metric `name` over the nodes named `exec` in `plan`.
fn metric(plan: &Arc<dyn ExecutionPlan>, exec: &str, name: &str) -> usize {
    super::metric_total(plan, Some(exec), name)
}

/// Runs `sql` with device memory requests for `what` refused after `after` were granted;
/// returns whether it matched the CPU's answer, and the plan it ran.
async fn run_with_fault(
    seed: u64,
    sql: &str,
    what: &str,
    after: usize,
) -> (Result<bool, String>, Option<Arc<dyn ExecutionPlan>>) {
    let (gpu, cpu) = (gpu_ctx(seed), cpu_ctx(seed));
    let want = sorted_rows(&cpu.sql(sql).await.unwrap().collect().await.unwrap());
    // The session's budget: held here so that the query's operators find it with the fault.
    let budget = Gpu::for_session(&GpuConfig::from_options(gpu.state().config_options()), &gpu.session_id()).unwrap();
    budget.memory().fail_after(Some((what, after)));
    let plan = gpu.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let got = collect(Arc::clone(&plan), gpu.task_ctx()).await;
    budget.memory().fail_after(None);
    match got {
        Ok(batches) => (Ok(sorted_rows(&batches) == want), Some(plan)),
        Err(e) => (Err(e.to_string()), Some(plan)),
    }
}

const JOINS: [&str; 8] = [
    "SELECT a.k, a.v, b.v FROM a JOIN b ON a.k = b.k",
    "SELECT a.k, a.v, b.v FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT a.k, a.v, b.v FROM a RIGHT JOIN b ON a.k = b.k",
    "SELECT a.k, a.v, b.s FROM a FULL JOIN b ON a.k = b.k",
    "SELECT a.k, a.v FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
    "SELECT a.k, a.s FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
    "SELECT a.k FROM a WHERE a.k NOT IN (SELECT k FROM b)",
    "SELECT a.k, b.s FROM a JOIN b ON a.k = b.k AND a.v < b.v",
];

/// A build that cannot get device memory goes to DataFusion's join, which then probes every
/// partition: every join type gives DataFusion's answer, without a rerun of the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_builds_out_of_memory_run_on_datafusions_join() {
    let _l = gpu_lock();
    let Some(_g) = gpu_or_skip("gpu_join_builds_out_of_memory_run_on_datafusions_join") else { return };
    let seed = fresh_seed("gpu_join_builds_out_of_memory_run_on_datafusions_join");
    for sql in JOINS {
        let (matched, plan) = run_with_fault(seed, sql, "the join's hash table", 0).await;
        let plan = plan.unwrap();
        assert_eq!(matched, Ok(true), "{sql}");
        assert!(metric(&plan, "GpuHashJoinExec", "cpu_fallbacks") > 0, "{sql}: no join fell back");
        assert_eq!(metric(&plan, "GpuQueryExec", "cpu_reruns"), 0, "{sql}: the query ran again");
    }
}

/// A probe chunk that cannot get device memory before any of its output was sent: a join
/// whose build rows do not depend on the probe (inner, right, right semi/anti) finishes that
/// partition on DataFusion's join over the kept build rows; one that emits build rows at the end
/// (left, full) runs the query again on DataFusion's plan. Either way: DataFusion's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_probes_out_of_memory_finish_on_the_cpu() {
    let _l = gpu_lock();
    let Some(_g) = gpu_or_skip("gpu_join_probes_out_of_memory_finish_on_the_cpu") else { return };
    let seed = fresh_seed("gpu_join_probes_out_of_memory_finish_on_the_cpu");
    let mut partition_fallbacks = 0;
    for sql in JOINS {
        let (matched, plan) = run_with_fault(seed, sql, "join match counts", 2).await;
        let plan = plan.unwrap();
        assert_eq!(matched, Ok(true), "{sql}");
        // (A join type whose probe makes no match counts, such as NOT IN's, may not meet the fault.)
        partition_fallbacks += metric(&plan, "GpuHashJoinExec", "cpu_fallbacks");
    }
    assert!(partition_fallbacks > 0, "no join partition finished on the CPU");
}

/// Device memory that runs out while output windows are made: a chunk that sent nothing yet
/// goes to DataFusion's join with the rest of its partition; one that sent some cannot (its rows
/// would repeat), and the query runs again on DataFusion's plan, its GPU output held back until
/// then. (Which of the two a fault meets depends on timing; `query::tests` checks the rerun.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_queries_out_of_memory_mid_output_finish_on_the_cpu() {
    let _l = gpu_lock();
    let Some(_g) = gpu_or_skip("gpu_queries_out_of_memory_mid_output_finish_on_the_cpu") else { return };
    let seed = fresh_seed("gpu_queries_out_of_memory_mid_output_finish_on_the_cpu");
    for sql in [JOINS[0], JOINS[3], "SELECT a.k % 7, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k GROUP BY 1"] {
        let (matched, plan) = run_with_fault(seed, sql, "a joined column", 3).await;
        assert_eq!(matched, Ok(true), "{sql}");
        let plan = plan.unwrap();
        let (fallbacks, reruns) =
            (metric(&plan, "GpuHashJoinExec", "cpu_fallbacks"), metric(&plan, "GpuQueryExec", "cpu_reruns"));
        assert!(fallbacks + reruns > 0, "{sql}: the fault was not met");
    }
}

/// An aggregate reading a GPU join's output on the device whose first chunk cannot get device
/// memory finishes its partition on DataFusion's aggregate, over the rows it kept and the rest
/// downloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregates_over_device_input_out_of_memory_finish_on_the_cpu() {
    let _l = gpu_lock();
    let Some(_g) = gpu_or_skip("gpu_aggregates_over_device_input_out_of_memory_finish_on_the_cpu") else { return };
    let seed = fresh_seed("gpu_aggregates_over_device_input_out_of_memory_finish_on_the_cpu");
    // Grouped by a column as it is (a key the GPU cannot compute, such as `a.k % 7`, makes the
    // partial read the join's output on the host).
    let sql = "SELECT a.k, count(*), sum(b.v), max(b.v) FROM a JOIN b ON a.k = b.k GROUP BY 1";
    let (matched, plan) = run_with_fault(seed, sql, "group representatives", 0).await;
    let plan = plan.unwrap();
    assert_eq!(matched, Ok(true), "{sql}");
    let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
    assert!(text.contains("reads GpuHashJoinExec's batches on the device"), "{text}");
    assert!(metric(&plan, "GpuAggregateExec", "cpu_fallbacks") > 0, "{text}");
}

/// Without gpu.memory.cpu_fallback the error stands, and names the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_without_cpu_fallback_the_error_stands() {
    let _l = gpu_lock();
    let Some(_g) = gpu_or_skip("gpu_without_cpu_fallback_the_error_stands") else { return };
    let seed = fresh_seed("gpu_without_cpu_fallback_the_error_stands");
    let gpu = gpu_ctx(seed);
    gpu.sql("SET gpu.memory.cpu_fallback = false").await.unwrap().collect().await.unwrap();
    let budget = Gpu::for_session(&GpuConfig::from_options(gpu.state().config_options()), &gpu.session_id()).unwrap();
    budget.memory().fail_after(Some(("the join's hash table", 0)));
    let err = gpu.sql(JOINS[0]).await.unwrap().collect().await.unwrap_err().to_string();
    budget.memory().fail_after(None);
    assert!(err.contains("refused by fault injection"), "{err}");
}
