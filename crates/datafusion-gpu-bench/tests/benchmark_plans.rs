//! TPC-H and SSB plans through the rule's pieces, without a device: the filters and projections
//! below their joins and aggregates compile for the GPU, fused join inputs keep the plans sane,
//! and the shared statistics walk gives every node its own walk's estimates. The plans come from
//! data generated at a small scale factor, which is why these tests live with the generators.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_gpu::GpuConfig;
use datafusion_gpu::exec::statistics::{estimated_rows, with_shared_statistics};
use datafusion_gpu::exec::{GpuAggregateExec, GpuFilterProjectExec, GpuHashJoinExec};
use datafusion_gpu::rule::eligibility::bounded_rows;
use datafusion_gpu::rule::join_inputs::{fuse_join_inputs, fused_side};
use datafusion_gpu_bench::tpch::{Suite, data, queries};

/// The physical plans of every TPC-H and SSB query over data generated at `sf`, in two
/// partitions, as DataFusion plans them without the GPU rule: (suite, query, plan) for each
/// statement that plans.
async fn benchmark_plans(sf: f64) -> Vec<(Suite, &'static str, Arc<dyn ExecutionPlan>)> {
    benchmark_plans_in(sf, SessionConfig::new().with_target_partitions(2)).await
}

/// [`benchmark_plans`] planned under `config`.
async fn benchmark_plans_in(sf: f64, config: SessionConfig) -> Vec<(Suite, &'static str, Arc<dyn ExecutionPlan>)> {
    plans_over(sf, config, None).await
}

/// The plans of every TPC-H and SSB query at scale `sf` under `config`, over in-memory tables, or
/// over Parquet files written under `parquet` (as a user registers them).
async fn plans_over(
    sf: f64,
    config: SessionConfig,
    parquet: Option<&std::path::Path>,
) -> Vec<(Suite, &'static str, Arc<dyn ExecutionPlan>)> {
    let mut plans = Vec::new();
    for suite in [Suite::Tpch, Suite::Ssb] {
        let tables = data::generate(suite, sf, 1, 2, &data::Progresses::new(false)).expect("generated data");
        let ctx = SessionContext::new_with_config(config.clone());
        match parquet {
            Some(root) => {
                let dir = data::data_dir(root, suite, sf);
                data::write_parquet(&dir, &tables).expect("written Parquet files");
                data::register_parquet(&ctx, &dir, suite).await.expect("registered Parquet tables");
            }
            None => data::register(&ctx, &tables).expect("registered tables"),
        }
        for q in queries::select(suite, &[], sf).expect("the suite's queries") {
            for sql in q.sql.split(';').filter(|s| !s.trim().is_empty()) {
                let Ok(df) = ctx.sql(sql).await else { continue };
                let Ok(plan) = df.create_physical_plan().await else { continue };
                plans.push((suite, q.name, plan));
            }
        }
    }
    plans
}

fn raw_aggregates(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<dyn ExecutionPlan>>) {
    if let Some(a) = plan.downcast_ref::<AggregateExec>()
        && a.mode().input_mode() == AggregateInputMode::Raw
    {
        out.push(Arc::clone(plan));
    }
    for c in plan.children() {
        raw_aggregates(c, out);
    }
}

/// The filters and projections of TPC-H and SSB below their first-stage aggregates compile
/// for the device (checked without a device: code generation only). Q1's and Q6's, the
/// scans of lineitem with decimal arithmetic, must; the others are listed with the reason.
#[tokio::test]
async fn benchmark_aggregate_inputs_compile_for_the_device() {
    let cfg = GpuConfig::default();
    let mut fused = Vec::new();
    for (suite, name, plan) in benchmark_plans(0.01).await {
        let mut aggs = Vec::new();
        raw_aggregates(&plan, &mut aggs);
        for a in aggs {
            for filters in [false, true] {
                let Ok(g) = GpuAggregateExec::try_new(Arc::clone(&a), &cfg) else { continue };
                let g = g.with_fused_input(filters);
                let line = displayable(&g as &dyn ExecutionPlan).one_line().to_string();
                println!("{} {name} (filters {filters}): {}", suite.name(), line.trim());
                if let Some(f) = g.fused_input() {
                    fused.push((name, filters, f.describe()));
                    // A filter on the scan can run on the host as well, and the kernels
                    // without it compile.
                    if filters && ["q1", "q6"].contains(&name) {
                        assert!(f.host_filter.is_some() && f.filtered_on_host().is_some(), "{name}");
                        let rest = f.filtered_on_host().unwrap();
                        assert!(rest.projection.inputs.len() <= f.projection.inputs.len());
                    }
                }
            }
        }
    }
    // By default filters stay on the CPU; Q1's decimal projection above its filter runs on
    // the GPU.
    let has = |q: &str, f: bool, what: &str| fused.iter().any(|(n, x, d)| *n == q && *x == f && d.contains(what));
    assert!(has("q1", false, "ProjectionExec") && !has("q1", false, "FilterExec"), "{fused:?}");
    for q in ["q1", "q6"] {
        assert!(has(q, true, "FilterExec"), "TPC-H {q}'s filter and projection did not compile: {fused:?}");
    }
}

fn joins(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<dyn ExecutionPlan>>) {
    if plan.downcast_ref::<HashJoinExec>().is_some() {
        out.push(Arc::clone(plan));
    }
    for c in plan.children() {
        joins(c, out);
    }
}

/// The filters and projections below the joins of TPC-H and SSB compile for the device
/// (code generation only, no device needed): listed per query, and those of TPC-H q3's and
/// q12's lineitem scans must.
#[tokio::test]
async fn benchmark_join_inputs_compile_for_the_device() {
    let cfg = GpuConfig { fuse_filters: true, ..GpuConfig::default() };
    let mut fused = Vec::new();
    for (suite, name, plan) in benchmark_plans(0.01).await {
        let mut found = Vec::new();
        joins(&plan, &mut found);
        for j in found {
            for (i, side) in j.children().into_iter().enumerate() {
                let Some(exec) = fused_side(side, i == 0, &cfg, None) else { continue };
                let line = displayable(exec.as_ref()).indent(false).to_string();
                println!("{} {name} side {i}: {}", suite.name(), line.lines().next().unwrap_or(""));
                fused.push((suite.name(), name, line));
            }
        }
    }
    println!("{} join inputs compile for the device", fused.len());
    for q in ["q3", "q12"] {
        assert!(
            fused.iter().any(|(s, n, l)| *s == "tpch" && *n == q && l.contains("l_shipdate")),
            "TPC-H {q}'s lineitem filter did not compile for the device: {fused:?}"
        );
    }
}

/// Over every TPC-H and SSB plan with its joins as GPU joins, taking their inputs onto the
/// device keeps the plan as DataFusion's sanity check wants it (each node's required
/// distribution and ordering) wherever it was before, and keeps every join's input schema.
#[tokio::test]
async fn benchmark_plans_stay_sane_with_fused_join_inputs() {
    use datafusion::config::ConfigOptions;
    use datafusion::physical_optimizer::sanity_checker::check_plan_sanity;
    let cfg = GpuConfig::default();
    let options = ConfigOptions::default();
    let sane = |plan: &Arc<dyn ExecutionPlan>| {
        plan.apply(|node| {
            check_plan_sanity(node, &options.optimizer)?;
            Ok(TreeNodeRecursion::Continue)
        })
        .is_ok()
    };
    let (mut checked, mut rewritten) = (0, 0);
    for (suite, name, plan) in benchmark_plans(0.01).await {
        let on_gpu = Arc::clone(&plan)
            .transform_up(|node| {
                if node.downcast_ref::<HashJoinExec>().is_none() {
                    return Ok(Transformed::no(node));
                }
                Ok(match GpuHashJoinExec::try_new(Arc::clone(&node), &cfg) {
                    Ok(g) => Transformed::yes(Arc::new(g) as Arc<dyn ExecutionPlan>),
                    Err(_) => Transformed::no(node),
                })
            })
            .unwrap()
            .data;
        if !sane(&on_gpu) {
            continue;
        }
        let fused = fuse_join_inputs(Arc::clone(&on_gpu), &cfg, None).unwrap();
        let shown = displayable(fused.as_ref()).indent(true).to_string();
        assert!(sane(&fused), "{} {name}: the fused plan fails the sanity check\n{shown}", suite.name());
        assert_eq!(fused.schema(), on_gpu.schema(), "{} {name}", suite.name());
        checked += 1;
        rewritten += usize::from(shown.contains("GpuFilterProjectExec"));
    }
    println!("{checked} plans checked, {rewritten} with join inputs on the device");
    assert!(checked >= 30 && rewritten >= 20, "{checked} plans checked, {rewritten} rewritten");
}

/// One shared statistics walk gives every node of TPC-H and SSB plans the estimates and
/// bounds a walk of its own gives, in less time.
#[tokio::test]
async fn shared_statistics_give_the_same_estimates() {
    let progress = data::Progresses::new(false);
    for suite in [Suite::Tpch, Suite::Ssb] {
        let tables = data::generate(suite, 0.05, 1, 4, &progress).unwrap();
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        data::register(&ctx, &tables).unwrap();
        let (mut own, mut shared) = (0.0, 0.0);
        for q in queries::select(suite, &[], 0.05).unwrap() {
            let plan = ctx.sql(&q.sql).await.unwrap().create_physical_plan().await.unwrap();
            let mut nodes = Vec::new();
            plan.apply(|n| {
                nodes.push(Arc::clone(n));
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            let ask = |nodes: &[Arc<dyn ExecutionPlan>]| -> Vec<(Option<usize>, Option<usize>)> {
                nodes.iter().map(|n| (estimated_rows(n), bounded_rows(n))).collect()
            };
            let t = std::time::Instant::now();
            let alone = ask(&nodes);
            own += t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let together = with_shared_statistics(|| ask(&nodes));
            shared += t.elapsed().as_secs_f64();
            assert_eq!(alone, together, "{suite:?} {}", q.name);
            assert!(alone.iter().any(|(e, _)| e.is_some()), "{suite:?} {}: no estimates at all", q.name);
        }
        println!(
            "{suite:?}: every node's estimate and bound, {:.2} ms alone, {:.2} ms shared",
            own * 1e3,
            shared * 1e3
        );
    }
}

/// Over every TPC-H and SSB plan with its scans cached and its joins and aggregates on the GPU,
/// running the regions over one-batch cached tables as one partition keeps the plan sane
/// (each node's required distribution and ordering), its schema and its output partitioning,
/// and leaves every GPU operator's declared partitions matching its inputs', with no CPU filter
/// directly below a GPU join.
#[tokio::test]
async fn cached_regions_in_one_partition_keep_the_plans_sane() {
    one_partition_regions_stay_sane(benchmark_plans(0.01).await, "in-memory tables");
}

/// As [`cached_regions_in_one_partition_keep_the_plans_sane`], over the suites' Parquet files: every
/// scan of them goes through the table cache, and the regions over them run as one partition.
#[tokio::test]
async fn cached_parquet_regions_in_one_partition_keep_the_plans_sane() {
    let root = std::env::temp_dir().join(format!("dfg-plans-parquet-{}", std::process::id()));
    // (Each file cut into two ranges, as DataFusion cuts large ones.)
    let mut config = SessionConfig::new().with_target_partitions(2);
    config.options_mut().optimizer.repartition_file_min_size = 1;
    let plans = plans_over(0.01, config, Some(&root)).await;
    let cached = plans
        .iter()
        .filter(|(_, _, plan)| {
            let shown = displayable(
                datafusion_gpu::exec::cached_scan::cache_table_scans(Arc::clone(plan), &GpuConfig::default(), u64::MAX)
                    .unwrap()
                    .as_ref(),
            )
            .indent(true)
            .to_string();
            shown.contains("Parquet files through the table cache") && !shown.contains("DataSourceExec")
        })
        .count();
    let total = plans.len();
    one_partition_regions_stay_sane(plans, "Parquet files");
    let _ = std::fs::remove_dir_all(&root);
    assert!(cached >= 30, "{cached} of {total} plans read every scan through the table cache");
}

fn one_partition_regions_stay_sane(plans: Vec<(Suite, &'static str, Arc<dyn ExecutionPlan>)>, tables: &str) {
    use datafusion::config::ConfigOptions;
    use datafusion::physical_optimizer::sanity_checker::check_plan_sanity;
    use datafusion::physical_plan::ExecutionPlanProperties;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::joins::PartitionMode;
    use datafusion_gpu::exec::cached_scan::cache_table_scans;
    use datafusion_gpu::rule::one_partition::run_cached_regions_in_one_partition;
    let cfg = GpuConfig::default();
    let options = ConfigOptions::default();
    let count = |p: &Arc<dyn ExecutionPlan>| p.output_partitioning().partition_count();
    let (mut checked, mut collapsed) = (0, 0);
    for (suite, name, plan) in plans {
        let on_gpu = cache_table_scans(Arc::clone(&plan), &cfg, u64::MAX)
            .unwrap()
            .transform_up(|node| {
                let gpu: Option<Arc<dyn ExecutionPlan>> = if node.downcast_ref::<HashJoinExec>().is_some() {
                    GpuHashJoinExec::try_new(Arc::clone(&node), &cfg).ok().map(|g| Arc::new(g) as _)
                } else if node.downcast_ref::<AggregateExec>().is_some() {
                    GpuAggregateExec::try_new(Arc::clone(&node), &cfg)
                        .ok()
                        .map(|g| Arc::new(g.with_fused_input(true).with_exchange(false)) as _)
                } else {
                    None
                };
                Ok(gpu.map_or(Transformed::no(node), Transformed::yes))
            })
            .unwrap()
            .data;
        let on_gpu = fuse_join_inputs(on_gpu, &cfg, None).unwrap();
        let one = run_cached_regions_in_one_partition(Arc::clone(&on_gpu)).unwrap();
        let shown = displayable(one.as_ref()).indent(true).to_string();
        let what = format!("{} {name} over {tables}:\n{shown}", suite.name());
        one.apply(|node| {
            check_plan_sanity(node, &options.optimizer).unwrap_or_else(|e| panic!("{e}: {what}"));
            let children = node.children();
            let here = count(node);
            if node.downcast_ref::<GpuFilterProjectExec>().is_some() {
                assert_eq!(here, count(children[0]), "{what}");
            }
            if let Some(j) = node.downcast_ref::<GpuHashJoinExec>() {
                // Every filter of a join's input is on the device, also one that DataFusion
                // spread over the partitions with a round-robin repartition this pass dropped.
                for c in &children {
                    let c = c.downcast_ref::<CoalescePartitionsExec>().map_or(*c, |g| g.input());
                    assert!(c.downcast_ref::<FilterExec>().is_none(), "a CPU filter under a GPU join: {what}");
                }
                assert_eq!(here, count(children[1]), "{what}");
                if j.mode().unwrap() == PartitionMode::Partitioned {
                    assert_eq!(count(children[0]), count(children[1]), "{what}");
                }
            }
            if let Some(a) = node.downcast_ref::<GpuAggregateExec>().filter(|a| !a.has_device_exchange()) {
                assert_eq!(here, count(a.children()[0]), "{what}");
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert_eq!(one.schema(), plan.schema(), "{what}");
        assert_eq!(count(&one), count(&plan), "{what}");
        let again = run_cached_regions_in_one_partition(Arc::clone(&one)).unwrap();
        assert_eq!(displayable(again.as_ref()).indent(true).to_string(), shown, "run twice: {what}");
        checked += 1;
        collapsed += usize::from(shown.contains("read as one"));
    }
    println!("{tables}: {checked} plans checked, {collapsed} with regions in one partition");
    assert!(
        checked >= 30 && collapsed >= 25,
        "{tables}: {checked} plans checked, {collapsed} with regions in one partition"
    );
}

/// TPC-H and SSB plans whose hash joins and aggregates are GPU ones (the aggregates with the
/// filters and projections below them fused, the joins' filtered inputs as GPU filters and
/// projections) travel through the GPU codec (bytes by `datafusion-proto` and back), as a
/// distributed engine sends a stage's plan to a worker, and give DataFusion's answers. In a
/// process without a device every one comes back as its DataFusion nodes in a
/// `CpuFallbackExec` that says so; with one, as the GPU exec.
#[tokio::test]
async fn benchmark_plans_with_gpu_operators_travel_through_the_codec() {
    use datafusion_gpu::distributed::GpuPlanCodec;
    use datafusion_gpu::exec::CpuFallbackExec;
    use datafusion_gpu::testing::sorted_rows;
    use datafusion_proto::bytes::{
        physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
    };
    let cfg = GpuConfig { min_rows: 0, ..GpuConfig::default() };
    let device = datafusion_gpu::device::probe::device_count().is_ok_and(|n| n > 0);
    let task = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2)).task_ctx();
    let (mut carried, mut joins_sent, mut all_filters) = (0, 0, 0);
    // Planned as a distributed session plans (datafusion-distributed turns the physical
    // scalar subquery off): its expressions decode only inside their ScalarSubqueryExec,
    // and a fused chain is sent apart from it.
    let mut config = SessionConfig::new().with_target_partitions(2);
    config.options_mut().optimizer.enable_physical_uncorrelated_scalar_subquery = false;
    for (suite, name, plan) in benchmark_plans_in(0.01, config).await {
        // Plans datafusion-proto cannot send without GPU execs are not this codec's to carry.
        if physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &GpuPlanCodec).is_err() {
            println!("{} {name}: datafusion-proto does not send this plan", suite.name());
            continue;
        }
        let mut sent = 0;
        let gpu_plan = Arc::clone(&plan)
            .transform_up(|node| {
                if node.downcast_ref::<AggregateExec>().is_some() {
                    return match GpuAggregateExec::try_new(Arc::clone(&node), &cfg) {
                        Ok(g) => {
                            sent += 1;
                            Ok(Transformed::yes(Arc::new(g.with_fused_input(true)) as Arc<dyn ExecutionPlan>))
                        }
                        Err(_) => Ok(Transformed::no(node)),
                    };
                }
                if node.downcast_ref::<HashJoinExec>().is_none() {
                    return Ok(Transformed::no(node));
                }
                match GpuHashJoinExec::try_new(Arc::clone(&node), &cfg) {
                    Ok(g) => {
                        sent += 1;
                        Ok(Transformed::yes(Arc::new(g) as Arc<dyn ExecutionPlan>))
                    }
                    Err(_) => Ok(Transformed::no(node)),
                }
            })
            .expect("joins and aggregates replaced")
            .data;
        let gpu_plan = fuse_join_inputs(gpu_plan, &cfg, None).expect("join inputs fused");
        let mut filters_sent = 0;
        gpu_plan
            .apply(|n| {
                filters_sent += usize::from(n.downcast_ref::<GpuFilterProjectExec>().is_some());
                Ok(TreeNodeRecursion::Continue)
            })
            .expect("plan walked");
        sent += filters_sent;
        let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&gpu_plan), &GpuPlanCodec)
            .unwrap_or_else(|e| panic!("{} {name}: a plan with GPU joins does not encode: {e}", suite.name()));
        let back = physical_plan_from_bytes_with_extension_codec(&bytes, &task, &GpuPlanCodec)
            .unwrap_or_else(|e| panic!("{} {name}: a plan with GPU joins does not decode: {e}", suite.name()));
        let shown = displayable(back.as_ref()).indent(true).to_string();
        let (mut gpu_joins, mut fallbacks) = (0, 0);
        back.apply(|n| {
            let any: &dyn std::any::Any = n.as_ref();
            gpu_joins += usize::from(
                any.is::<GpuHashJoinExec>() || any.is::<GpuAggregateExec>() || any.is::<GpuFilterProjectExec>(),
            );
            fallbacks += usize::from(
                any.downcast_ref::<CpuFallbackExec>()
                    .is_some_and(|f| f.reasons().iter().any(|r| r.to_string().starts_with("no GPU"))),
            );
            Ok(TreeNodeRecursion::Continue)
        })
        .expect("plan walked");
        match device {
            true => assert_eq!(gpu_joins, sent, "{} {name}: GPU operators lost on the way\n{shown}", suite.name()),
            false => assert_eq!(fallbacks, sent, "{} {name}: operators without their reason\n{shown}", suite.name()),
        }
        let want = datafusion::physical_plan::collect(Arc::clone(&plan), Arc::clone(&task)).await.expect("CPU answer");
        let got = datafusion::physical_plan::collect(back, Arc::clone(&task)).await.expect("decoded plan's answer");
        assert_eq!(
            sorted_rows(&got),
            sorted_rows(&want),
            "{} {name}: the decoded plan answers otherwise\n{shown}",
            suite.name()
        );
        carried += 1;
        joins_sent += sent;
        all_filters += filters_sent;
    }
    println!("{carried} plans carried with {joins_sent} GPU operators ({all_filters} filters and projections)");
    assert!(
        carried >= 33 && joins_sent >= 150 && all_filters >= 20,
        "{carried} plans, {joins_sent} GPU operators carried"
    );
}
