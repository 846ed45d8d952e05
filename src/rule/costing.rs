//! The cost model's view of a placed GPU exec: its shape from the plan's statistics, the
//! transfers its position needs, and the estimates against the CPU's.

use std::sync::Arc;

use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use super::eligibility::{bounded_rows, estimated_rows, likely_rows};
use super::repartition::Rebuilt;
use crate::columns::pinned::scans_pinned_memory;
use crate::config::GpuConfig;
use crate::cost::aggregate::{self as agg_cost, AggregateEstimate, AggregateShape};
use crate::cost::join::{self as join_cost, JoinEstimate, JoinShape};
use crate::cost::{
    Profile, Verdict, download_seconds, fmt_seconds, paper, row_bytes, staged_row_bytes, upload_seconds, value_bytes,
};
use crate::device::Gpu;
use crate::exec::join::{gathered_input, removable_repartition};
use crate::exec::{GpuAggregateExec, GpuFilterProjectExec, GpuHashJoinExec, as_gpu_exec};
use crate::join::OutputColumn;
use crate::join::triton::SpillSizes;
use crate::primitives::keys::KeyEncoding;

fn key_bytes(encoding: KeyEncoding) -> f64 {
    match encoding {
        KeyEncoding::Narrow32 => 4.0,
        KeyEncoding::Narrow64 | KeyEncoding::Wide => 8.0,
    }
}

/// Fixed cost of one step of an out-of-core join's driver (a partition's build, or one group of
/// its probe rows), whatever its size: 0.8 ms, the slope of the measured time over the steps
/// between 1/2 (32 steps) and 1/8 (128) of the state of `bench triton` on an H100 (0.68-1.08 ms
/// in three runs; docs/option-notes.md).
const OUT_OF_CORE_STEP_SECONDS: f64 = 0.8e-3;

/// The estimate of a GPU join, or `None` when neither the statistics nor the plan's shape
/// bound its input sizes ([`bounded_rows`]). With
/// `out_of_core_limit` (the memory limit its build exceeds) the join runs out of core and pays
/// Lutz et al.'s transfers: both sides down to host memory once and up again.
///
/// With `gpu` (the device the plan runs on), an input side that scans tables in its pinned
/// memory, directly or through filters and projections the device evaluates
/// ([`pinned_scan_bytes`]), is priced at the link's rate when that is cheaper than staging the
/// rows DataFusion's filter would leave.
pub fn join_estimate(
    exec: &GpuHashJoinExec,
    node: &Arc<dyn ExecutionPlan>,
    cfg: &GpuConfig,
    profile: &Arc<Profile>,
    out_of_core_limit: Option<u64>,
    gpu: Option<&Gpu>,
) -> Option<JoinEstimate> {
    let hj = node.downcast_ref::<HashJoinExec>()?;
    let (left, right) = (hj.left(), hj.right());
    let bounded = estimated_rows(left).is_none() || estimated_rows(right).is_none();
    let left_rows = bounded_rows(left)? as f64;
    let right_rows = bounded_rows(right)? as f64;
    // Without an estimate of the output, a foreign-key join's: one row per probe row.
    let output_rows = estimated_rows(node).map(|r| r as f64).unwrap_or(right_rows);
    let spec = exec.spec();
    let (bs, ps) = (exec.build_schema(), exec.probe_schema());
    let mut build_payload = 0.0;
    let mut probe_payload = 0.0;
    for o in &spec.output {
        match o {
            OutputColumn::Build(i) => build_payload += value_bytes(bs.field(*i).data_type()),
            OutputColumn::Probe(i) => probe_payload += value_bytes(ps.field(*i).data_type()),
            OutputColumn::Mark => {}
        }
    }
    let builds = match hj.partition_mode() {
        PartitionMode::Partitioned => left.output_partitioning().partition_count().max(1) as f64,
        _ => 1.0,
    };
    let probe_partitions = right.output_partitioning().partition_count().max(1) as f64;
    let probe_chunks = probe_partitions.max((right_rows / cfg.batch_rows.max(1) as f64).ceil());
    let shape = JoinShape {
        build_rows: (left_rows / builds).max(1.0),
        probe_rows: right_rows,
        output_rows,
        key_bytes: key_bytes(spec.keys.encoding),
        build_payload_bytes: build_payload,
        probe_payload_bytes: probe_payload,
        output_columns: spec.output.len() as f64,
        builds,
        probe_chunks,
    };
    // Bounded sizes price the algorithm that will run: the setting's default.
    let default = [spec.algorithm];
    let candidates = if bounded { &default[..] } else { exec.candidates() };
    let choice = join_cost::choose(&shape, candidates, profile);
    // A side that a GPU exec produces is read on the device: no upload for the GPU join, and
    // a download for the CPU one (that GPU exec was priced for a GPU parent or not at all).
    let partitioned = *hj.partition_mode() == PartitionMode::Partitioned;
    let mut up_bytes = 0.0;
    let mut cpu_down_bytes = 0.0;
    // What a host side costs to upload, as bytes staged through pinned buffers: a scan of
    // pinned tables goes up by DMA alone, its raw rows at the link's rate.
    let staged_rate = profile.coefficients("transfer").first().copied().unwrap_or(0.0);
    let mut notes = Vec::new();
    let mut host_side = |side: &Arc<dyn ExecutionPlan>, build: bool, staged: f64| {
        let fraction = host_filtered_fraction(side, build, cfg);
        if fraction < 1.0 {
            notes.push(format!(
                "{} upload priced at {:.0}% of its filter's input: DataFusion estimates the filter at 100% without column min/max (gpu.cost.default_selectivity_for_unbounded_filters)",
                if build { "build" } else { "probe" },
                fraction * 100.0
            ));
        }
        let staged = staged * fraction;
        match gpu {
            Some(g) if staged_rate > 0.0 && profile.h2d > 0.0 => match pinned_scan_bytes(side, build, cfg, g) {
                Some(raw) => staged.min(raw / profile.h2d / staged_rate),
                None => staged,
            },
            _ => staged,
        }
    };
    // Each upload also pays per batch: the builds' and the probe chunks' of the host sides only.
    let mut up_batches = 0.0;
    match device_side(left, partitioned, true, cfg) {
        Some(side) => cpu_down_bytes += left_rows * row_bytes(&side.schema()),
        None => {
            up_bytes += host_side(left, true, left_rows * staged_row_bytes(bs, cfg.narrow_decimals));
            up_batches += builds;
        }
    }
    match device_side(right, partitioned, false, cfg) {
        Some(side) => cpu_down_bytes += right_rows * row_bytes(&side.schema()),
        None => {
            up_bytes += host_side(right, false, right_rows * staged_row_bytes(ps, cfg.narrow_decimals));
            up_batches += probe_chunks;
        }
    }
    let mut down_bytes = output_rows * row_bytes(&hj.schema());
    let mut rounds_seconds = 0.0;
    if let Some(limit) = out_of_core_limit {
        let state = left_rows * row_bytes(bs) + right_rows * row_bytes(ps);
        // Nothing stays cached on the device: the first pass's upload is counted above.
        let (h2d, d2h) = paper::triton_transfer_bytes(state, 0.0);
        up_bytes += h2d - state;
        down_bytes += d2h;
        // The driver takes a step for each partition's build and for each group of its probe
        // rows (whatever streams they came from), in every partition's join when Partitioned.
        let build_bytes = (left_rows * row_bytes(bs) / builds) as u64;
        let share = limit / builds as u64;
        let sizes =
            SpillSizes::new(build_bytes, share.max(1), 1, false, 1, crate::join::window_bound(cfg.join_window_rows));
        let parts = sizes.partitions() as f64;
        let groups = (right_rows * row_bytes(ps) / builds / sizes.group_bytes as f64).ceil().max(parts);
        let steps = builds * (parts + groups);
        rounds_seconds = steps * OUT_OF_CORE_STEP_SECONDS;
    }
    // A Partitioned join reads its inputs through hash repartitions; on the GPU it drops them
    // and reads what they redistribute (`gpu.join.repartition` off), so only the CPU join pays
    // them.
    let cpu_exchange = match partitioned && !cfg.join_repartition {
        true => [(left, left_rows), (right, right_rows)]
            .into_iter()
            .filter(|(side, _)| removable_repartition(side).is_some())
            .map(|(side, rows)| join_cost::repartition_seconds(rows, row_bytes(&side.schema()), profile))
            .sum(),
        false => 0.0,
    };
    let verdict = Verdict {
        gpu_compute: choice.seconds() + rounds_seconds,
        upload: upload_seconds(up_bytes, up_batches, profile),
        // Most parents are CPU operators: count the download (a GPU parent would save it).
        download: download_seconds(down_bytes, profile),
        cpu: join_cost::cpu_seconds(&shape, profile),
        cpu_download: download_seconds(cpu_down_bytes, profile),
        cpu_exchange,
        min_speedup: cfg.min_speedup,
    };
    Some(JoinEstimate { shape, choice, verdict, bounded, notes, profile: Arc::clone(profile) })
}

/// The fraction of a host join input's estimated rows that crosses the link when the input is a
/// filter the device takes over (`gpu.fuse.expressions` and `gpu.fuse.filters`, projections
/// above it; below a build side's `CoalescePartitionsExec`), whose rows DataFusion estimates
/// with no selectivity at all: the filter's default selectivity
/// (`datafusion.optimizer.default_filter_selectivity`) when
/// `gpu.cost.default_selectivity_for_unbounded_filters` is on, else 1.
///
/// DataFusion's interval analysis gives a comparison with a literal a selectivity only from its
/// columns' min/max, which in-memory tables do not have; without them it estimates 100% of the
/// input (a predicate it cannot analyze gets the default selectivity instead). The CPU join's
/// estimate reads the same rows, but the upload is the GPU's alone, and the host filters a
/// selective filter's rows before they are staged (see `gpu.fuse.host_filter_below`): pricing every
/// input row's upload kept joins over selective filters on the CPU (SSB q1.x: 1.7-2.1x with
/// them on the GPU, 0.66-0.93x as the model placed them, on an H100; docs/option-notes.md).
pub fn host_filtered_fraction(side: &Arc<dyn ExecutionPlan>, build: bool, cfg: &GpuConfig) -> f64 {
    if !(cfg.default_selectivity_for_unbounded_filters && cfg.fuse_expressions && cfg.fuse_filters) {
        return 1.0;
    }
    let top = side_below_gather(side, build);
    let mut node = top;
    while let Some(p) = node.downcast_ref::<ProjectionExec>() {
        node = p.input();
    }
    let Some(filter) = node.downcast_ref::<FilterExec>() else { return 1.0 };
    // DataFusion's estimate first: code is generated only for a filter it left unbounded.
    let unbounded = matches!(
        (estimated_rows(node), estimated_rows(filter.input())),
        (Some(out), Some(input)) if input > 0 && out >= input
    );
    // Only where the device takes the filter: otherwise DataFusion's FilterExec runs on the host
    // and its output, whatever its size, is what goes up.
    match unbounded && matches!(GpuFilterProjectExec::try_new(top, cfg.fuse_filters), Ok(Some(_))) {
        true => f64::from(filter.default_selectivity()) / 100.0,
        false => 1.0,
    }
}

/// `side`, or what a build side's `CoalescePartitionsExec` gathers.
fn side_below_gather(side: &Arc<dyn ExecutionPlan>, build: bool) -> &Arc<dyn ExecutionPlan> {
    match build {
        true => gathered_input(side).unwrap_or(side),
        false => side,
    }
}

/// The bytes a join input `side` uploads straight from `gpu`'s pinned memory: a scan of pinned
/// tables, or the raw columns of one that filters and projections over it read when they compile
/// for the device (`gpu.fuse.expressions`; filters with `gpu.fuse.filters`), looking below a
/// build side's `CoalescePartitionsExec` (see [`crate::rule::join_inputs`]). `None` for any other
/// input, or one whose size the plan does not bound.
pub fn pinned_scan_bytes(side: &Arc<dyn ExecutionPlan>, build: bool, cfg: &GpuConfig, gpu: &Gpu) -> Option<f64> {
    let side = side_below_gather(side, build);
    // The scan below the side's filters and projections, checked before any code generation:
    // over pageable tables (the default) nothing is compiled here.
    let mut scan = side;
    loop {
        if let Some(p) = scan.downcast_ref::<ProjectionExec>() {
            scan = p.input();
        } else if let Some(f) = scan.downcast_ref::<FilterExec>() {
            scan = f.input();
        } else {
            break;
        }
    }
    if !scans_pinned_memory(scan, gpu) {
        return None;
    }
    if Arc::ptr_eq(scan, side) {
        return Some(bounded_rows(side)? as f64 * row_bytes(&side.schema()));
    }
    if !cfg.fuse_expressions {
        return None;
    }
    let exec = GpuFilterProjectExec::try_new(side, cfg.fuse_filters).ok()??;
    let fused = exec.fused();
    // A chain the device takes only in part reads the rows of a node above the scan.
    if !Arc::ptr_eq(&fused.input, scan) {
        return None;
    }
    Some(bounded_rows(scan)? as f64 * row_bytes(&fused.projection.upload_schema))
}

/// `g`, a Partitioned GPU join rebuilt to read the inputs of its hash repartitions
/// ([`GpuHashJoinExec::without_repartitions`]), priced again: it makes one build of every build
/// row, not one per partition. The CPU join it replaces still needs the repartitions, so their
/// cost stays on the CPU's side. `g` as it is when it was never priced.
///
/// `None` keeps the Partitioned GPU join as placed. The join is on the GPU either way (the
/// placement is settled), so the rebuilt join is measured against that one: its per-partition
/// builds plus the CPU's hashing of its inputs (and the transfers of any input a GPU exec
/// produces, down to be hashed and up again, not counted here). With
/// `gpu.experimental.reprice_against_cpu` the rebuilt join must beat the CPU join instead (a join placed with
/// its GPU parent without its download).
///
/// A join rebuilt because the GPU join below it was ([`Rebuilt::WithJoinBelow`]) is kept, priced
/// again: the alternative keeps that join's exchange, which its own repricing found dearer. So is
/// one whose inputs around the repartitions are all on the device, with `gpu.cost.resident_inputs`:
/// kept Partitioned, the CPU would hash device data, each input going down and up again (TPC-H
/// q20's semi join of `partsupp` with the `lineitem` sums over cached tables took 51-56 ms that
/// way on an H200, against 18 ms read around its repartitions).
pub fn reprice_without_repartitions(
    g: GpuHashJoinExec,
    why: Rebuilt,
    cfg: &GpuConfig,
    profile: &Arc<Profile>,
    gpu: Option<&Gpu>,
) -> Option<GpuHashJoinExec> {
    let Some(old) = g.estimate() else { return Some(g) };
    let exchange = old.verdict.cpu_exchange;
    let partitioned_gpu = old.verdict.gpu_total() + exchange;
    let node = Arc::clone(g.original());
    match join_estimate(&g, &node, cfg, profile, None, gpu) {
        Some(mut e) => {
            e.verdict.cpu_exchange = e.verdict.cpu_exchange.max(exchange);
            if why == Rebuilt::WithJoinBelow || (cfg.resident_inputs && inputs_on_device(&node, cfg)) {
                return Some(g.with_estimate(e));
            }
            let keep = match (cfg.reprice_against_cpu, g.placed_for_gpu_parent()) {
                (false, _) => e.verdict.gpu_total() <= partitioned_gpu,
                (true, true) => Verdict { download: 0.0, ..e.verdict.clone() }.gpu_wins(),
                (true, false) => e.verdict.gpu_wins(),
            };
            // Its own estimate may lose to the CPU: EXPLAIN says what it was measured against.
            let note = (!cfg.reprice_against_cpu && !e.verdict.gpu_wins()).then(|| {
                format!("kept on the GPU against the Partitioned GPU join it replaces, estimated at {} with the CPU's repartitions", fmt_seconds(partitioned_gpu))
            });
            if !keep {
                log::debug!(
                    "join kept Partitioned: read around its repartitions, {}; the Partitioned GPU join with the \
                     CPU's repartitions: {}",
                    e.verdict.describe(),
                    fmt_seconds(partitioned_gpu)
                );
            }
            keep.then(|| {
                let g = g.with_estimate(e);
                match note {
                    Some(why) => g.with_removal_note(&why),
                    None => g,
                }
            })
        }
        None => Some(g),
    }
}

/// The GPU exec whose device batches a GPU join reads for its input `side`: `side` itself, or
/// what it gathers or redistributes where the GPU join reads around that node. A `Partitioned`
/// join's hash repartitions are removed once it is on the GPU
/// ([`super::repartition::remove_join_repartitions`]), and a build side collects every partition
/// of what a `CoalescePartitionsExec` merges (see `exec::join`).
///
/// In each place, the GPU exec may also sit below filters and projections that
/// [`GpuFilterProjectExec`] evaluates on the device once the join is there
/// ([`crate::rule::join_inputs`]): a GPU aggregate's groups renamed by a `ProjectionExec` before a
/// join, for example.
pub fn device_side(
    side: &Arc<dyn ExecutionPlan>,
    partitioned: bool,
    build: bool,
    cfg: &GpuConfig,
) -> Option<Arc<dyn ExecutionPlan>> {
    let on_device = |node: &Arc<dyn ExecutionPlan>| match as_gpu_exec(node) {
        Some(_) => Some(Arc::clone(node)),
        None => computed_over_gpu(node, cfg),
    };
    if let Some(found) = on_device(side) {
        return Some(found);
    }
    let below = match (partitioned, build) {
        (true, _) => removable_repartition(side).map(|r| r.input()),
        (false, true) => gathered_input(side),
        // A probe side behind a round-robin repartition of a region that runs as one partition
        // over cached tables: that pass drops the repartition (TPC-H q8's region join).
        (false, false) => super::one_partition::round_robin_dropped(side, cfg),
    }?;
    on_device(below)
}

/// Whether every input of `node` (a hash join or an aggregate) is on the device for its GPU
/// exec: each side of a join as [`device_side`] finds it, an aggregate's input likewise, and a
/// final aggregate stage's the states of a GPU partial stage that it merges on the device
/// (`gpu.aggregate.exchange`).
pub fn inputs_on_device(node: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> bool {
    use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
    if let Some(hj) = node.downcast_ref::<HashJoinExec>() {
        let partitioned = *hj.partition_mode() == PartitionMode::Partitioned;
        return device_side(hj.left(), partitioned, true, cfg).is_some()
            && device_side(hj.right(), partitioned, false, cfg).is_some();
    }
    let Some(agg) = node.downcast_ref::<AggregateExec>() else { return false };
    match agg.mode() {
        AggregateMode::Final | AggregateMode::FinalPartitioned => {
            cfg.aggregate_exchange && crate::exec::aggregate::gpu_partial_below_exchange(agg).is_ok()
        }
        _ => device_side(agg.input(), false, false, cfg).is_some(),
    }
}

/// The GPU exec below `top`'s chain of filters and projections, when
/// [`GpuFilterProjectExec`] takes the chain onto the device (`gpu.fuse.expressions`, filters
/// with `gpu.fuse.filters`) and reads that exec's batches there.
fn computed_over_gpu(top: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> Option<Arc<dyn ExecutionPlan>> {
    if !cfg.fuse_expressions {
        return None;
    }
    // Walk the chain first: the exec below compiles the chain's expressions.
    let mut node = top;
    loop {
        node = if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            p.input()
        } else if let Some(f) = node.downcast_ref::<FilterExec>()
            && cfg.fuse_filters
        {
            f.input()
        } else {
            break;
        };
    }
    if std::ptr::eq(node, top) || as_gpu_exec(node).is_none() {
        return None;
    }
    let exec = GpuFilterProjectExec::try_new(top, cfg.fuse_filters).ok()??;
    let input = &exec.fused().input;
    as_gpu_exec(input).is_some().then(|| Arc::clone(input))
}

/// The estimate of a GPU aggregate: from the statistics' input size, else (with
/// `gpu.cost.aggregate_join_pricing`) from its likely size ([`likely_rows`]), marked `bounded`; `None`
/// without either.
pub fn aggregate_estimate(
    exec: &GpuAggregateExec,
    cfg: &GpuConfig,
    profile: &Arc<Profile>,
) -> Option<AggregateEstimate> {
    let agg = exec.original();
    let input = agg.children().first().map(|c| Arc::clone(*c))?;
    let estimated = estimated_rows(&input);
    let bounded = estimated.is_none();
    let rows = match estimated {
        Some(rows) => rows as f64,
        None if cfg.aggregate_join_pricing => likely_rows(&input)?,
        None => return None,
    };
    let layout = exec.layout();
    let upload = &layout.upload_schema;
    let groups = if layout.groups == 0 {
        1.0
    } else {
        // DataFusion's estimate of the output rows, else (no distinct counts) the input's.
        estimated_rows(agg).map(|g| g as f64).unwrap_or(rows).clamp(1.0, rows.max(1.0))
    };
    let key_width: f64 = upload.fields()[..layout.groups].iter().map(|f| value_bytes(f.data_type())).sum();
    let key_bytes = if layout.groups == 1 && key_width <= 4.0 { 4.0 } else { 8.0 };
    let value_bytes_per_row = (row_bytes(upload) - key_width).max(0.0);
    let partitions = input.output_partitioning().partition_count().max(1) as f64;
    let shape = AggregateShape {
        rows,
        groups,
        key_bytes,
        value_bytes: value_bytes_per_row,
        // A COUNT(DISTINCT) is priced as one more accumulator (its pairs group-by is not modelled).
        accumulators: (layout.first.len() + layout.first_distinct.len()).max(1) as f64,
        chunks: partitions.max((rows / cfg.batch_rows.max(1) as f64).ceil()),
    };
    let choice = agg_cost::choose(&shape, profile);
    // An input that a GPU exec produces is read on the device: no upload for the GPU aggregate,
    // and a download for the CPU one.
    let device_input = if cfg.aggregate_join_pricing { device_side(&input, false, false, cfg) } else { None };
    let (up, cpu_down) = match &device_input {
        Some(side) => (0.0, download_seconds(rows * row_bytes(&side.schema()), profile)),
        None => (upload_seconds(rows * staged_row_bytes(upload, cfg.narrow_decimals), shape.chunks, profile), 0.0),
    };
    let verdict = Verdict {
        gpu_compute: choice.seconds(),
        upload: up,
        // Each input partition returns the states of its groups.
        download: download_seconds((groups * partitions).min(rows) * row_bytes(&layout.state_schema), profile),
        cpu: agg_cost::cpu_seconds(&shape, profile),
        cpu_download: cpu_down,
        cpu_exchange: 0.0,
        min_speedup: cfg.min_speedup,
    };
    Some(AggregateEstimate { shape, choice, verdict, bounded, notes: Vec::new(), profile: Arc::clone(profile) })
}

#[cfg(test)]
mod tests {
    use datafusion::common::JoinType;

    use super::*;
    use crate::testing::{hash_join_on_first, memory_kv};

    fn source(rows: i64) -> Arc<dyn ExecutionPlan> {
        memory_kv(rows, 1)
    }

    /// `l` and `r` joined on `k` (CollectLeft), projected to `projection`.
    fn join(
        l: Arc<dyn ExecutionPlan>,
        r: Arc<dyn ExecutionPlan>,
        join_type: JoinType,
        projection: Option<Vec<usize>>,
    ) -> Arc<dyn ExecutionPlan> {
        hash_join_on_first(l, r, join_type, projection, PartitionMode::CollectLeft)
    }

    /// `input` filtered on `v < 10`, which DataFusion estimates at all of its rows (an in-memory
    /// table has no min/max).
    fn v_below_ten(input: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{Column, binary, lit};
        let v = Arc::new(Column::new("v", 1)) as Arc<dyn datafusion::physical_plan::PhysicalExpr>;
        let predicate = binary(v, Operator::Lt, lit(10i64), &input.schema()).unwrap();
        Arc::new(FilterExec::try_new(predicate, input).unwrap())
    }

    /// A filter the device takes over an in-memory scan, which DataFusion estimates at all of
    /// its input (its columns have no min/max), uploads the filter's default selectivity of the
    /// rows: as a probe, as a build below its coalesce, under a projection; not with the option
    /// or filter fusion off, nor for a scan alone; and the join's upload estimate follows.
    #[test]
    fn unbounded_filters_upload_their_default_selectivity() {
        use datafusion::physical_expr::expressions::Column;
        use datafusion::physical_plan::PhysicalExpr;
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        use datafusion::physical_plan::projection::ProjectionExpr;
        let filtered = |rows: i64| v_below_ten(source(rows));
        let cfg = GpuConfig::default();
        let probe = filtered(400_000);
        assert_eq!(estimated_rows(&probe), Some(400_000), "DataFusion keeps every row without min/max");
        assert!((host_filtered_fraction(&probe, false, &cfg) - 0.2).abs() < 1e-12);
        let projected: Arc<dyn ExecutionPlan> = {
            let k = Arc::new(Column::new("k", 0)) as Arc<dyn PhysicalExpr>;
            Arc::new(ProjectionExec::try_new(vec![ProjectionExpr::new(k, "k")], Arc::clone(&probe)).unwrap())
        };
        assert!((host_filtered_fraction(&projected, false, &cfg) - 0.2).abs() < 1e-12);
        let gathered: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(filtered(2_000)));
        assert!((host_filtered_fraction(&gathered, true, &cfg) - 0.2).abs() < 1e-12);
        assert_eq!(host_filtered_fraction(&source(400_000), false, &cfg), 1.0);
        let off = GpuConfig { default_selectivity_for_unbounded_filters: false, ..GpuConfig::default() };
        assert_eq!(host_filtered_fraction(&probe, false, &off), 1.0);
        let unfused = GpuConfig { fuse_filters: false, ..GpuConfig::default() };
        assert_eq!(host_filtered_fraction(&probe, false, &unfused), 1.0);

        let profile = Arc::new(Profile::h100());
        let estimate = |cfg: &GpuConfig| {
            let node = join(source(2_000), filtered(400_000), JoinType::Inner, None);
            let exec = GpuHashJoinExec::try_new(Arc::clone(&node), cfg).unwrap();
            let e = join_estimate(&exec, &node, cfg, &profile, None, None).unwrap();
            (e.clone(), exec.with_estimate(e))
        };
        let ((on, placed), (plain, _)) = (estimate(&cfg), estimate(&off));
        assert!(on.verdict.upload < plain.verdict.upload, "{} vs {}", on.verdict.describe(), plain.verdict.describe());
        // EXPLAIN names the assumption.
        assert_eq!(on.notes.len(), 1, "{:?}", on.notes);
        assert!(plain.notes.is_empty());
        let shown = datafusion::physical_plan::displayable(&placed).one_line().to_string();
        assert!(shown.contains("probe upload priced at 20% of its filter's input"), "{shown}");
    }

    /// A join above another join has no statistics to estimate from; the cost model still
    /// prices it, from the plan's shape (its larger input, or the side a semi join returns).
    #[test]
    fn joins_above_joins_are_priced_from_a_bound() {
        let lower = join(source(1000), source(5000), JoinType::Inner, Some(vec![2, 3]));
        let bound = bounded_rows(&lower).expect("a join of two memory tables is bounded");
        match estimated_rows(&lower) {
            Some(rows) => assert_eq!(bound, rows),
            None => assert_eq!(bound, 5000),
        }
        let semi = join(source(1000), source(5000), JoinType::LeftSemi, None);
        if estimated_rows(&semi).is_none() {
            assert_eq!(bounded_rows(&semi), Some(1000));
        }
        let upper = join(source(25), Arc::clone(&lower), JoinType::Inner, Some(vec![2, 3]));
        let cfg = GpuConfig::default();
        let exec = GpuHashJoinExec::try_new(Arc::clone(&upper), &cfg).unwrap();
        let e =
            join_estimate(&exec, &upper, &cfg, &Arc::new(Profile::h100()), None, None).expect("priced from the bound");
        assert_eq!(e.shape.build_rows, 25.0);
        assert_eq!(e.shape.probe_rows, bound as f64);
        assert_eq!(e.bounded, estimated_rows(&lower).is_none());
        // Placed, on the GPU or left on the CPU, the lower join gives no estimate to the joins
        // above: both are priced from its inputs' bound.
        let gpu_lower: Arc<dyn ExecutionPlan> = Arc::new(GpuHashJoinExec::try_new(Arc::clone(&lower), &cfg).unwrap());
        let cpu_lower: Arc<dyn ExecutionPlan> = Arc::new(crate::exec::CpuFallbackExec::new(Arc::clone(&lower), vec![]));
        for placed in [&gpu_lower, &cpu_lower] {
            assert_eq!(estimated_rows(placed), None, "{}", placed.name());
            assert_eq!(bounded_rows(placed), Some(5000), "{}", placed.name());
        }
    }

    /// Where DataFusion has no estimate, a join's likely output is its probe side times the
    /// share of its build side's table that the build keeps (a filter DataFusion estimates at
    /// all of its input keeping its default selectivity): tighter than the bound, which is the
    /// larger input.
    #[test]
    fn joins_with_filtered_builds_keep_the_filters_share() {
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        let cfg = GpuConfig::default();
        // A join of unfiltered tables on the GPU (no statistics pass up): all of its probe.
        let lower: Arc<dyn ExecutionPlan> = Arc::new(
            GpuHashJoinExec::try_new(join(source(100), source(8000), JoinType::Inner, Some(vec![2, 3])), &cfg).unwrap(),
        );
        assert_eq!(estimated_rows(&lower), None);
        assert_eq!(likely_rows(&lower), Some(8000.0));
        // A dimension of 25 rows filtered (DataFusion: all 25 without min/max): 20% of them.
        let filtered = v_below_ten(source(25));
        assert_eq!(estimated_rows(&filtered), Some(25));
        assert_eq!(likely_rows(&filtered), Some(5.0));
        let upper = join(Arc::new(CoalescePartitionsExec::new(filtered)), Arc::clone(&lower), JoinType::Inner, None);
        assert_eq!(estimated_rows(&upper), None);
        assert_eq!(bounded_rows(&upper), Some(8000));
        assert_eq!(likely_rows(&upper), Some(1600.0));
        // A semi join returns its side, as bounded.
        let semi = join(source(25), Arc::clone(&lower), JoinType::RightSemi, None);
        assert_eq!(likely_rows(&semi), Some(8000.0));
    }

    /// A join reading a GPU join's output on the device (directly, through the coalescing of a
    /// build side, or through the hash repartitions a Partitioned GPU join drops) does not pay
    /// its upload; the CPU join pays its download instead. A CPU lower join changes neither.
    #[test]
    fn inputs_on_the_device_are_downloaded_for_the_cpu_not_uploaded() {
        use datafusion::physical_expr::expressions::Column;
        use datafusion::physical_plan::Partitioning;
        use datafusion::physical_plan::PhysicalExpr;
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        use datafusion::physical_plan::repartition::RepartitionExec;
        let cfg = GpuConfig::default();
        let profile = Arc::new(Profile::h100());
        let lower = join(source(2000), source(50_000), JoinType::Inner, Some(vec![2, 3]));
        // As the rule leaves it: annotated on the CPU, or on the GPU.
        let cpu_lower: Arc<dyn ExecutionPlan> = Arc::new(crate::exec::CpuFallbackExec::new(Arc::clone(&lower), vec![]));
        let gpu_lower: Arc<dyn ExecutionPlan> = Arc::new(GpuHashJoinExec::try_new(Arc::clone(&lower), &cfg).unwrap());
        let hashed = |p: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let key = Arc::new(Column::new(p.schema().field(0).name(), 0)) as Arc<dyn PhysicalExpr>;
            Arc::new(RepartitionExec::try_new(p, Partitioning::Hash(vec![key], 4)).unwrap())
        };
        let estimate = |node: Arc<dyn ExecutionPlan>| {
            let exec = GpuHashJoinExec::try_new(Arc::clone(&node), &cfg).unwrap();
            join_estimate(&exec, &node, &cfg, &profile, None, None).expect("bounded")
        };
        // lower as the probe side (directly), the build side (coalesced) and a Partitioned
        // join's repartitioned side.
        let make = |what: &str, lower: &Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let lower = Arc::clone(lower);
            match what {
                "probe" => join(source(100), lower, JoinType::Inner, None),
                "build" => join(Arc::new(CoalescePartitionsExec::new(lower)), source(100), JoinType::Inner, None),
                _ => hash_join_on_first(
                    hashed(source(100)),
                    hashed(lower),
                    JoinType::Inner,
                    None,
                    PartitionMode::Partitioned,
                ),
            }
        };
        for what in ["probe", "build", "partitioned probe"] {
            let on_cpu = estimate(make(what, &cpu_lower));
            let on_gpu = estimate(make(what, &gpu_lower));
            assert_eq!(on_cpu.verdict.cpu_download, 0.0, "{what}");
            assert!(on_gpu.verdict.cpu_download > 0.0, "{what}: {}", on_gpu.verdict.describe());
            assert!(on_gpu.verdict.upload < on_cpu.verdict.upload, "{what}");
            assert_eq!(on_gpu.verdict.cpu, on_cpu.verdict.cpu, "{what}");
            assert!(on_gpu.verdict.describe().contains("download of its GPU input"), "{what}");
        }
        // Both sides on the device: nothing goes up, not even the per-batch cost of uploads.
        let both = estimate(join(
            Arc::new(CoalescePartitionsExec::new(Arc::clone(&gpu_lower))),
            Arc::clone(&gpu_lower),
            JoinType::Inner,
            None,
        ));
        assert_eq!(both.verdict.upload, 0.0, "{}", both.verdict.describe());
        // A CollectLeft probe side behind a repartition is read through the host: not on the device.
        let probe = hashed(Arc::clone(&gpu_lower));
        assert!(device_side(&probe, false, false, &cfg).is_none());
        assert!(device_side(&probe, true, false, &cfg).is_some());
    }

    /// A Partitioned join's CPU estimate pays the hash repartitions of its inputs, which the GPU
    /// join drops; not with `gpu.join.repartition` on, and a CollectLeft join pays none.
    #[test]
    fn partitioned_cpu_joins_pay_their_repartitions() {
        use datafusion::physical_expr::expressions::Column;
        use datafusion::physical_plan::repartition::RepartitionExec;
        use datafusion::physical_plan::{Partitioning, PhysicalExpr};
        let profile = Arc::new(Profile::h100());
        let hashed = |p: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let key = Arc::new(Column::new(p.schema().field(0).name(), 0)) as Arc<dyn PhysicalExpr>;
            Arc::new(RepartitionExec::try_new(p, Partitioning::Hash(vec![key], 4)).unwrap())
        };
        let estimate = |node: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig| {
            let exec = GpuHashJoinExec::try_new(Arc::clone(node), cfg).unwrap();
            join_estimate(&exec, node, cfg, &profile, None, None).expect("estimated").verdict
        };
        let (build_rows, probe_rows) = (2_000i64, 400_000i64);
        // Four input partitions: the rebuilt join keeps the repartitions' parallelism.
        let partitioned = hash_join_on_first(
            hashed(memory_kv(build_rows, 4)),
            hashed(memory_kv(probe_rows, 4)),
            JoinType::Inner,
            None,
            PartitionMode::Partitioned,
        );
        let cfg = GpuConfig::default();
        let v = estimate(&partitioned, &cfg);
        let row = row_bytes(&source(1).schema());
        let want = join_cost::repartition_seconds((build_rows + probe_rows) as f64, row, &profile);
        assert!(want > 0.0);
        assert!((v.cpu_exchange - want).abs() < 1e-12, "{} vs {want}", v.cpu_exchange);
        assert!((v.cpu_total() - v.cpu - want).abs() < 1e-12);
        assert!(v.describe().contains("hash repartition of its inputs"), "{}", v.describe());
        let kept = GpuConfig { join_repartition: true, ..GpuConfig::default() };
        assert_eq!(estimate(&partitioned, &kept).cpu_exchange, 0.0);
        let collect_left = join(source(build_rows), source(probe_rows), JoinType::Inner, None);
        assert_eq!(estimate(&collect_left, &cfg).cpu_exchange, 0.0);

        // Without its repartitions, the join is priced again. It stays on the GPU either way: it
        // is kept unless the Partitioned GPU join (its builds, and the CPU's repartitions) is
        // expected to be faster; with gpu.experimental.reprice_against_cpu, only when it beats the CPU join,
        // which still pays the repartitions.
        let exec = GpuHashJoinExec::try_new(Arc::clone(&partitioned), &cfg).unwrap();
        let e = join_estimate(&exec, &partitioned, &cfg, &profile, None, None).unwrap();
        let partitioned_gpu = e.verdict.gpu_total() + e.verdict.cpu_exchange;
        let priced = exec.with_estimate(e);
        let rebuilt = priced.without_repartitions().unwrap().expect("both sides repartitioned");
        let fresh = join_estimate(&rebuilt, rebuilt.original(), &cfg, &profile, None, None).unwrap().verdict;
        assert_eq!(fresh.cpu_exchange, 0.0, "the rebuilt join has no repartitions of its own");
        // One build of 2 000 rows against four of 500, and no repartitions: the rebuilt join.
        assert!(fresh.gpu_total() <= partitioned_gpu, "{} vs {partitioned_gpu}", fresh.describe());
        let kept = reprice_without_repartitions(rebuilt, Rebuilt::AroundRepartitions, &cfg, &profile, None)
            .expect("the rebuilt join is kept");
        let verdict = kept.estimate().unwrap().verdict.clone();
        assert!((verdict.cpu_exchange - want).abs() < 1e-12);
        // EXPLAIN says what a kept join that loses to the CPU was measured against.
        let shown = datafusion::physical_plan::displayable(&kept).one_line().to_string();
        assert_eq!(shown.contains("kept on the GPU against the Partitioned GPU join"), !verdict.gpu_wins(), "{shown}");
        // A small join: the CPU wins it, yet its CollectLeft form beats the Partitioned GPU
        // join it replaces, so it stays on the GPU with that note.
        let small = hash_join_on_first(
            hashed(memory_kv(16, 4)),
            hashed(memory_kv(64, 4)),
            JoinType::Inner,
            None,
            PartitionMode::Partitioned,
        );
        let exec = GpuHashJoinExec::try_new(Arc::clone(&small), &cfg).unwrap();
        let e = join_estimate(&exec, &small, &cfg, &profile, None, None).unwrap();
        let rebuilt = exec.with_estimate(e).without_repartitions().unwrap().expect("both sides repartitioned");
        let kept = reprice_without_repartitions(rebuilt, Rebuilt::AroundRepartitions, &cfg, &profile, None)
            .expect("kept on the GPU");
        assert!(!kept.estimate().unwrap().verdict.gpu_wins());
        let shown = datafusion::physical_plan::displayable(&kept).one_line().to_string();
        assert!(shown.contains("kept on the GPU against the Partitioned GPU join"), "{shown}");
        let against_cpu = GpuConfig { reprice_against_cpu: true, ..GpuConfig::default() };
        let rebuilt = priced.without_repartitions().unwrap().expect("both sides repartitioned");
        let gpu_wins = fresh.gpu_total() < fresh.cpu_total() + want;
        match reprice_without_repartitions(rebuilt, Rebuilt::AroundRepartitions, &against_cpu, &profile, None) {
            Some(kept) => {
                assert!(gpu_wins);
                assert!((kept.estimate().unwrap().verdict.cpu_exchange - want).abs() < 1e-12);
            }
            None => assert!(!gpu_wins),
        }
    }

    /// A GPU join below a projection or a filter that the device evaluates is a device input too
    /// (the projection renames and computes, the filter keeps some rows); not with
    /// `gpu.fuse.expressions` off, nor a filter with `gpu.fuse.filters` off, nor over a CPU join.
    #[test]
    fn inputs_computed_on_the_device_from_a_gpu_join_are_device_inputs() {
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{Column, binary, lit};
        use datafusion::physical_plan::PhysicalExpr;
        use datafusion::physical_plan::filter::FilterExec;
        use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
        let cfg = GpuConfig::default();
        let cpu_lower = join(source(2000), source(50_000), JoinType::Inner, Some(vec![2, 3]));
        let gpu_lower: Arc<dyn ExecutionPlan> =
            Arc::new(GpuHashJoinExec::try_new(Arc::clone(&cpu_lower), &cfg).unwrap());
        let projected = |input: &Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let schema = input.schema();
            let k = Arc::new(Column::new(schema.field(0).name(), 0)) as Arc<dyn PhysicalExpr>;
            let v = Arc::new(Column::new(schema.field(1).name(), 1)) as Arc<dyn PhysicalExpr>;
            let doubled = binary(Arc::clone(&v), Operator::Plus, v, &schema).unwrap();
            let exprs = vec![ProjectionExpr::new(k, "key"), ProjectionExpr::new(doubled, "twice")];
            Arc::new(ProjectionExec::try_new(exprs, Arc::clone(input)).unwrap())
        };
        let filtered = |input: &Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let schema = input.schema();
            let k = Arc::new(Column::new(schema.field(0).name(), 0)) as Arc<dyn PhysicalExpr>;
            Arc::new(
                FilterExec::try_new(binary(k, Operator::Gt, lit(10i64), &schema).unwrap(), Arc::clone(input)).unwrap(),
            )
        };
        let no_filters = GpuConfig { fuse_filters: false, ..GpuConfig::default() };
        let no_fusion = GpuConfig { fuse_expressions: false, ..GpuConfig::default() };
        for side in [projected(&gpu_lower), filtered(&gpu_lower), projected(&filtered(&gpu_lower))] {
            let found = device_side(&side, false, false, &cfg).expect("computed on the device from the GPU join");
            assert!(Arc::ptr_eq(&found, &gpu_lower));
            assert!(device_side(&side, false, false, &no_fusion).is_none());
            let upper = join(source(100), Arc::clone(&side), JoinType::Inner, None);
            let exec = GpuHashJoinExec::try_new(Arc::clone(&upper), &cfg).unwrap();
            let e = join_estimate(&exec, &upper, &cfg, &Arc::new(Profile::h100()), None, None).expect("bounded");
            assert!(e.verdict.cpu_download > 0.0, "{}", e.verdict.describe());
        }
        assert!(device_side(&projected(&gpu_lower), false, false, &no_filters).is_some());
        assert!(device_side(&filtered(&gpu_lower), false, false, &no_filters).is_none());
        assert!(device_side(&projected(&cpu_lower), false, false, &cfg).is_none());
    }

    /// A join input scanning pinned tables, directly or through a filter the device evaluates,
    /// is priced at the link's rate where that beats staging the filtered rows; the same plan over
    /// pageable batches, or without the device, keeps the staged price.
    #[test]
    fn gpu_inputs_from_pinned_tables_upload_at_the_links_rate() {
        use datafusion::datasource::memory::MemorySourceConfig;
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{Column, binary, lit};
        use datafusion::physical_plan::filter::FilterExec;
        let _l = crate::testing::gpu_lock();
        let Some(gpu) = crate::testing::gpu_or_skip("gpu_inputs_from_pinned_tables_upload_at_the_links_rate") else {
            return;
        };
        let rows = 2_000_000i64;
        let scan = memory_kv(rows, 4);
        let data = scan.downcast_ref::<datafusion::datasource::source::DataSourceExec>().unwrap();
        let memory = data.data_source().downcast_ref::<MemorySourceConfig>().unwrap();
        let pinned = crate::columns::pinned::pin_partitions(&gpu, memory.partitions()).unwrap();
        let pinned_scan =
            MemorySourceConfig::try_new_exec(&pinned, scan.schema(), None).unwrap() as Arc<dyn ExecutionPlan>;
        // Keeps 95% of the rows: staging them costs more than the raw rows' DMA.
        let filtered = |input: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let pred = binary(Arc::new(Column::new("v", 1)), Operator::Gt, lit(rows / 20), &input.schema()).unwrap();
            Arc::new(FilterExec::try_new(pred, input).unwrap())
        };
        // DataFusion estimates the filter at every row (no min/max): the model knows it keeps
        // most of them only without assuming the filter's default selectivity for its upload.
        let cfg = GpuConfig { default_selectivity_for_unbounded_filters: false, ..GpuConfig::default() };
        let profile = Arc::new(Profile::h100());
        for probe in [Arc::clone(&pinned_scan), filtered(Arc::clone(&pinned_scan))] {
            assert!(pinned_scan_bytes(&probe, false, &cfg, &gpu).is_some());
            let node = join(source(1000), Arc::clone(&probe), JoinType::Inner, None);
            let exec = GpuHashJoinExec::try_new(Arc::clone(&node), &cfg).unwrap();
            let staged = join_estimate(&exec, &node, &cfg, &profile, None, None).unwrap();
            let direct = join_estimate(&exec, &node, &cfg, &profile, None, Some(&gpu)).unwrap();
            assert!(
                direct.verdict.upload < staged.verdict.upload,
                "{} vs {}",
                direct.verdict.describe(),
                staged.verdict.describe()
            );
        }
        // Assuming it (the default), staging a fifth of the rows is priced below the raw rows'
        // DMA, and the cheaper of the two is taken.
        let assumed = GpuConfig::default();
        let node = join(source(1000), filtered(Arc::clone(&pinned_scan)), JoinType::Inner, None);
        let exec = GpuHashJoinExec::try_new(Arc::clone(&node), &assumed).unwrap();
        let staged = join_estimate(&exec, &node, &assumed, &profile, None, None).unwrap();
        let direct = join_estimate(&exec, &node, &assumed, &profile, None, Some(&gpu)).unwrap();
        assert!(direct.verdict.upload <= staged.verdict.upload);
        let pageable = filtered(memory_kv(rows, 4));
        assert!(pinned_scan_bytes(&pageable, false, &cfg, &gpu).is_none());
        let off = GpuConfig { fuse_expressions: false, ..GpuConfig::default() };
        assert!(pinned_scan_bytes(&filtered(Arc::clone(&pinned_scan)), false, &off, &gpu).is_none());
    }

    /// An aggregate over a join whose output DataFusion cannot estimate is priced from the
    /// join's likely size (with `gpu.cost.aggregate_join_pricing`; without it, not at all), and marked
    /// bounded; reading a GPU join, it uploads nothing and the CPU aggregate pays the download.
    #[tokio::test]
    async fn aggregates_over_joins_are_priced_from_their_likely_size() {
        use datafusion::physical_plan::aggregates::AggregateExec;
        use datafusion::prelude::{SessionConfig, SessionContext};
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        ctx.register_table("a", crate::testing::memory_kv_table(2_000, 1)).unwrap();
        ctx.register_table("b", crate::testing::memory_kv_table(300_000, 1)).unwrap();
        let sql = "SELECT b.v, sum(a.v) FROM a JOIN b ON a.k = b.k GROUP BY b.v";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        // The lowest aggregate: the one reading the join.
        let mut node = plan;
        let mut agg = None;
        loop {
            if node.downcast_ref::<AggregateExec>().is_some() {
                agg = Some(Arc::clone(&node));
            }
            let Some(child) = node.children().first().map(|c| Arc::clone(*c)) else { break };
            node = child;
        }
        let agg = agg.expect("an aggregate");
        let input = Arc::clone(agg.children()[0]);
        let join = input.downcast_ref::<HashJoinExec>().expect("the aggregate reads the join");
        let cfg = GpuConfig::default();
        let profile = Arc::new(Profile::h100());
        let estimate = |agg: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig| {
            aggregate_estimate(&GpuAggregateExec::try_new(Arc::clone(agg), cfg).unwrap(), cfg, &profile)
        };
        let e = estimate(&agg, &cfg).expect("priced");
        assert!(e.verdict.upload > 0.0 && e.verdict.cpu_download == 0.0, "{}", e.verdict.describe());
        // Over the join on the GPU, which passes no statistics up: priced from the join's likely
        // size (all of its probe: the build keeps its whole table), with no upload, and the CPU
        // aggregate pays the download.
        let gpu_join: Arc<dyn ExecutionPlan> = Arc::new(GpuHashJoinExec::try_new(Arc::clone(&input), &cfg).unwrap());
        assert_eq!(estimated_rows(&gpu_join), None);
        assert_eq!(gpu_join.children()[0].schema(), join.left().schema());
        let recompute = datafusion::physical_plan::execution_plan::ReplaceChildrenOptions::new(
            datafusion::physical_plan::ChildrenPropertiesMode::Recompute,
        );
        let over_gpu = Arc::clone(&agg).replace_children(vec![gpu_join], recompute).unwrap();
        let d = estimate(&over_gpu, &cfg).expect("priced from the likely size");
        assert!(d.bounded && d.shape.rows == 300_000.0, "{:?}", d.shape);
        assert_eq!(d.verdict.upload, 0.0, "{}", d.verdict.describe());
        assert!(d.verdict.cpu_download > 0.0, "{}", d.verdict.describe());
        let off = GpuConfig { aggregate_join_pricing: false, ..GpuConfig::default() };
        assert!(estimate(&over_gpu, &off).is_none());
    }

    /// A join reads its inputs on the device when both are GPU outputs, not when one is a CPU
    /// operator's; a final aggregate stage when its exchange reads a GPU partial's states (and
    /// gpu.aggregate.exchange merges them there), and a partial stage when its input is a GPU
    /// operator's output.
    #[tokio::test]
    async fn inputs_on_the_device_are_recognised_for_joins_and_aggregate_stages() {
        use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        use datafusion::prelude::{SessionConfig, SessionContext};
        let cfg = GpuConfig::default();
        let gpu = |p: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            Arc::new(GpuHashJoinExec::try_new(p, &cfg).unwrap())
        };
        let lower = || join(source(2000), source(50_000), JoinType::Inner, Some(vec![2, 3]));
        let gathered = |p| Arc::new(CoalescePartitionsExec::new(p)) as Arc<dyn ExecutionPlan>;
        let both = join(gathered(gpu(lower())), gpu(lower()), JoinType::Inner, None);
        assert!(inputs_on_device(&both, &cfg));
        let one = join(gathered(lower()), gpu(lower()), JoinType::Inner, None);
        assert!(!inputs_on_device(&one, &cfg));

        // SELECT sum(v): Final over a coalesce of the Partial, which reads the table.
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        ctx.register_table("t", crate::testing::memory_kv_table(10_000, 2)).unwrap();
        let plan = ctx.sql("SELECT sum(v) FROM t").await.unwrap().create_physical_plan().await.unwrap();
        let mut node = Arc::clone(&plan);
        while node.downcast_ref::<AggregateExec>().is_none_or(|a| *a.mode() != AggregateMode::Final) {
            node = Arc::clone(node.children()[0]);
        }
        let coalesce = Arc::clone(node.children()[0]);
        let partial = Arc::clone(coalesce.children()[0]);
        assert!(!inputs_on_device(&node, &cfg), "a CPU partial's states are on the host");
        assert!(!inputs_on_device(&partial, &cfg), "the partial reads a memory table");
        let gpu_partial: Arc<dyn ExecutionPlan> =
            Arc::new(GpuAggregateExec::try_new(Arc::clone(&partial), &cfg).unwrap());
        use datafusion::physical_plan::ChildrenPropertiesMode;
        use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
        let replace = |p: Arc<dyn ExecutionPlan>, c| {
            p.replace_children(vec![c], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)).unwrap()
        };
        let over_gpu = replace(Arc::clone(&node), replace(coalesce, gpu_partial));
        assert!(inputs_on_device(&over_gpu, &cfg));
        assert!(!inputs_on_device(&over_gpu, &GpuConfig { aggregate_exchange: false, ..cfg.clone() }));
        // A partial stage over a join: on the device once the join is on the GPU.
        ctx.register_table("u", crate::testing::memory_kv_table(10_000, 2)).unwrap();
        let sql = "SELECT sum(t.v) FROM t JOIN u ON t.k = u.k";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let mut partial = Arc::clone(&plan);
        while partial.downcast_ref::<AggregateExec>().is_none_or(|a| *a.mode() != AggregateMode::Partial) {
            partial = Arc::clone(partial.children()[0]);
        }
        assert!(!inputs_on_device(&partial, &cfg));
        use datafusion::common::tree_node::{Transformed, TreeNode};
        let on_gpu = Arc::clone(&partial)
            .transform_up(|n| match n.downcast_ref::<HashJoinExec>() {
                Some(_) => Ok(Transformed::yes(gpu(n))),
                None => Ok(Transformed::no(n)),
            })
            .unwrap()
            .data;
        assert!(
            inputs_on_device(&on_gpu, &cfg),
            "{}",
            datafusion::physical_plan::displayable(on_gpu.as_ref()).indent(true)
        );
    }

    /// A small join is priced from the plan's statistics, with its transfers, and the CPU wins;
    /// every candidate algorithm has an estimate.
    #[test]
    fn small_joins_are_priced_and_stay_on_the_cpu() {
        let (l, r) = (source(1000), source(5000));
        let node = join(l, r, JoinType::Inner, None);
        let cfg = GpuConfig::default();
        let exec = GpuHashJoinExec::try_new(Arc::clone(&node), &cfg).unwrap();
        let e = join_estimate(&exec, &node, &cfg, &Arc::new(Profile::h100()), None, None)
            .expect("memory sources have row counts");
        assert_eq!(e.shape.build_rows, 1000.0);
        assert_eq!(e.shape.probe_rows, 5000.0);
        assert_eq!(e.shape.key_bytes, 8.0);
        assert_eq!(e.choice.estimates.len(), 5);
        assert!(e.verdict.upload > 0.0 && e.verdict.download > 0.0 && e.verdict.cpu > 0.0, "{e:?}");
        assert!(!e.verdict.gpu_wins(), "{}", e.verdict.describe());
        let exec = exec.with_estimate(e);
        assert!(exec.estimate().is_some());
    }
}
