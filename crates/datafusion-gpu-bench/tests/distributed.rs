//! Every TPC-H and SSB query through `datafusion-distributed` workers started in this process
//! (2 and 3 of them, on localhost ports; `DFG_DISTRIBUTED_WORKERS=2,4` picks others) gives
//! single-process DataFusion's answers (`DFG_DISTRIBUTED_PLANS=DIR` writes each staged plan
//! there). The coordinator cuts each plan into stages and the GPU rule places their operators; the workers
//! decode the stage plans with the GPU codec. Without a device every stage runs on the CPU (the
//! operators annotated with why); with one, GPU operators run inside the workers' stages.

use std::path::Path;
use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_distributed::DistributedExec;
use datafusion_gpu::distributed::{LocalWorkers, distributed_session_state, gpu_operators_in_stages};
use datafusion_gpu::testing::{fresh_seed, sorted_rows};
use datafusion_gpu_bench::tpch::{Suite, data, queries};

/// Scale factor of the generated data.
const SF: f64 = 0.1;

/// The worker counts each suite runs through: `DFG_DISTRIBUTED_WORKERS` (e.g. `2,4`), else 2 and 3.
fn worker_counts() -> Vec<usize> {
    std::env::var("DFG_DISTRIBUTED_WORKERS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).filter(|&n| n > 0).collect::<Vec<_>>())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![2, 3])
}

/// `sql` (one query, as the runner sends it) run in `ctx`: its rows, sorted, and its physical plan.
async fn run(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<(Vec<String>, Arc<dyn ExecutionPlan>)> {
    let df = ctx.sql(sql).await?;
    let plan = df.clone().create_physical_plan().await?;
    Ok((sorted_rows(&df.collect().await?), plan))
}

/// A session of `n` workers of this process, over the Parquet files of `suite` in `dir`.
async fn distributed(n: usize, dir: &Path, suite: Suite) -> (SessionContext, LocalWorkers) {
    let workers = LocalWorkers::start(n, None, None).await.expect("local workers");
    let config = SessionConfig::new().with_target_partitions(4);
    let state = distributed_session_state(config, workers.resolver().expect("worker URLs")).expect("session");
    let ctx = SessionContext::from(state);
    // Small files: a task per 256 KiB of Parquet, so that every scan is cut into several tasks.
    ctx.sql("SET distributed.file_scan_config_bytes_per_partition = 262144").await.unwrap().collect().await.unwrap();
    data::register_parquet(&ctx, dir, suite).await.expect("tables registered");
    (ctx, workers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn benchmark_queries_through_local_workers_give_datafusions_answers() {
    let seed = fresh_seed("distributed");
    let device = datafusion_gpu::device::probe::device_count().is_ok_and(|n| n > 0);
    let root = std::env::temp_dir().join(format!("dfg-distributed-{}-{seed}", std::process::id()));
    let (mut staged, mut with_gpu_stages, mut total) = (0, 0, 0);
    for suite in [Suite::Tpch, Suite::Ssb] {
        let dir = root.join(suite.name());
        let tables = data::generate(suite, SF, seed, 2, &data::Progresses::new(false)).expect("generated data");
        data::write_parquet(&dir, &tables).expect("Parquet written");
        drop(tables);
        let single = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        data::register_parquet(&single, &dir, suite).await.expect("tables registered");
        let queries = queries::select(suite, &[], SF).expect("the suite's queries");
        let mut want = Vec::new();
        for q in &queries {
            want.push(run(&single, &q.sql).await.unwrap_or_else(|e| panic!("{} {}: {e}", suite.name(), q.name)).0);
        }
        for &n in &worker_counts() {
            let (ctx, workers) = distributed(n, &dir, suite).await;
            for (q, want) in queries.iter().zip(&want) {
                let (got, plan) = run(&ctx, &q.sql)
                    .await
                    .unwrap_or_else(|e| panic!("{} {} through {n} workers: {e}", suite.name(), q.name));
                let shown = datafusion_distributed::display_plan_ascii(plan.as_ref(), false);
                assert_eq!(&got, want, "{} {} through {n} workers answers otherwise\n{shown}", suite.name(), q.name);
                if let Some(dir) = std::env::var_os("DFG_DISTRIBUTED_PLANS") {
                    // The staged plans as EXPLAIN draws them, for a record.
                    let file = Path::new(&dir).join(format!("{}-{}-{n}w.txt", suite.name(), q.name));
                    std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&file, &shown)).expect("plan written");
                }
                let (gpu_ops, boundaries) = gpu_operators_in_stages(&plan);
                total += 1;
                staged += usize::from(plan.downcast_ref::<DistributedExec>().is_some() && boundaries > 0);
                with_gpu_stages += usize::from(gpu_ops > 0);
                if !device {
                    assert_eq!(
                        gpu_ops,
                        0,
                        "{} {}: GPU operators placed without a device\n{shown}",
                        suite.name(),
                        q.name
                    );
                }
            }
            workers.stop().await.expect("workers stopped");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    println!("{total} runs: {staged} cut into stages, {with_gpu_stages} with GPU operators inside workers' stages");
    assert!(staged * 10 >= total * 9, "only {staged} of {total} runs were distributed");
    if device {
        assert!(
            with_gpu_stages * 10 >= total * 8,
            "only {with_gpu_stages} of {total} runs had GPU operators in workers' stages"
        );
    }
}
