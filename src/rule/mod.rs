//! `GpuOptimizerRule`: the physical optimizer rule that moves joins and aggregates to the GPU,
//! and annotates every one it leaves on the CPU with the reason.

pub mod costing;
pub mod device_filters;
pub mod eligibility;
pub mod join_inputs;
pub mod join_sides;
pub mod one_partition;
pub mod output_split;
pub mod repartition;

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan};

pub use eligibility::FallbackReason;

use crate::config::GpuConfig;
use crate::cost::{Estimate, PlacementSetting, Profile, Verdict, fmt_seconds, profile};
use crate::device::{Gpu, probe};
use crate::exec::cached_scan::{CACHED_SCAN_NAME, cache_table_scans};
use crate::exec::cached_table::CachedTableWriteExec;
use crate::exec::join::{gathered_input, removable_repartition};
use crate::exec::query::GpuQueryExec;
use crate::exec::{CpuFallbackExec, GpuAggregateExec, GpuCachedScanExec, GpuHashJoinExec};

/// Replaces DataFusion's `HashJoinExec` and `AggregateExec` with GPU execs where they give the
/// same answer, and annotates the rest. Controlled by the `gpu.` session options.
#[derive(Debug, Default)]
pub struct GpuOptimizerRule {}

impl GpuOptimizerRule {
    pub fn new() -> Self {
        GpuOptimizerRule {}
    }
}

/// Removes annotations from an earlier run of the rule, so that running it again is idempotent.
fn strip_annotations(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    // A plan the rule placed before: DataFusion's plan it kept for a rerun (at the root, or as
    // a write's input).
    let plan = match (plan.as_ref() as &dyn std::any::Any).downcast_ref::<GpuQueryExec>() {
        Some(q) => Arc::clone(q.cpu_plan()),
        None => plan,
    };
    plan.transform_up(|node| {
        if let Some(q) = (node.as_ref() as &dyn std::any::Any).downcast_ref::<GpuQueryExec>() {
            return Ok(Transformed::yes(Arc::clone(q.cpu_plan())));
        }
        if let Some(child) = crate::exec::fallback::fallback_input(&node) {
            return Ok(Transformed::yes(child));
        }
        // (A scan read as one partition stays: the plan above it was rebuilt for one partition.)
        if let Some(source) = node
            .downcast_ref::<GpuCachedScanExec>()
            .filter(|s| !s.is_one_partition())
            .and_then(GpuCachedScanExec::source)
        {
            return Ok(Transformed::yes(Arc::clone(source)));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

/// A GPU exec with the cost model's estimate attached, or, when the model expects the CPU to be
/// faster, unchanged with that reason added to `reasons` (so the rule keeps the CPU operator).
/// With `resident` (every input on the device, `gpu.cost.resident_inputs`) the estimate only
/// chooses the algorithm: it is attached whatever it says, with EXPLAIN's note where it favours
/// the CPU.
fn priced<G, S, A>(
    exec: G,
    estimate: Option<Estimate<S, A>>,
    attach: impl FnOnce(G, Estimate<S, A>) -> G,
    resident: bool,
    reasons: &mut Vec<FallbackReason>,
) -> G {
    match estimate {
        Some(mut e) if resident => {
            if !e.verdict.gpu_wins() {
                e.notes.push("on the GPU all the same: its inputs are on the device (gpu.cost.resident_inputs)".into());
            }
            attach(exec, e)
        }
        Some(e) if !e.verdict.gpu_wins() => {
            reasons.push(FallbackReason::Cost(e.verdict.describe()));
            exec
        }
        Some(e) => attach(exec, e),
        None => exec,
    }
}

impl PhysicalOptimizerRule for GpuOptimizerRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let cfg = GpuConfig::from_options(config);
        let plan = strip_annotations(plan)?;
        if !cfg.enable {
            return Ok(plan);
        }
        let fallback = cfg.cpu_fallback;
        let placed = self.place_enabled(Arc::clone(&plan), config, cfg)?;
        // With GPU operators in it, a query that runs out of device memory where no operator
        // could finish on the CPU, or whose GPU expressions fail, runs again on DataFusion's
        // plan. A write (`INSERT ... SELECT`) runs its input again, never itself: a rerun of
        // the sink would write twice. A plan that writes anywhere else, or otherwise (a cached
        // table's MERGE), is not run again.
        let mut gpu_ops = false;
        let (mut sinks, mut other_writes) = (0usize, 0usize);
        placed.apply(|n| {
            // (A cached scan alone hands its CPU parent host batches: no device work to rerun.)
            gpu_ops |= (crate::exec::as_gpu_exec(n).is_some() && n.name() != CACHED_SCAN_NAME) || on_the_gpu(n);
            sinks += n.downcast_ref::<DataSinkExec>().is_some() as usize;
            other_writes += n.downcast_ref::<CachedTableWriteExec>().is_some() as usize;
            Ok(TreeNodeRecursion::Continue)
        })?;
        if !fallback || !gpu_ops {
            return Ok(placed);
        }
        Ok(match (sinks, sink_input(&placed), sink_input(&plan)) {
            (0, _, _) if other_writes == 0 => Arc::new(GpuQueryExec::new(placed, plan)),
            (1, Some(gpu_input), Some(cpu_input)) => {
                let input: Arc<dyn ExecutionPlan> = Arc::new(GpuQueryExec::new(gpu_input, cpu_input));
                placed
                    .transform_down(|n| match n.downcast_ref::<DataSinkExec>() {
                        Some(_) => {
                            let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                            let n = n.replace_children(vec![Arc::clone(&input)], recompute)?;
                            Ok(Transformed::new(n, true, TreeNodeRecursion::Jump))
                        }
                        None => Ok(Transformed::no(n)),
                    })?
                    .data
            }
            _ => placed,
        })
    }

    fn name(&self) -> &str {
        "gpu"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The input of the one write (`DataSinkExec`) in `plan`.
fn sink_input(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let mut input = None;
    plan.apply(|n| {
        if let Some(sink) = n.downcast_ref::<DataSinkExec>() {
            input = Some(Arc::clone(sink.input()));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    input
}

impl GpuOptimizerRule {
    /// `plan` with its operators placed as [`PhysicalOptimizerRule::optimize`] places them, without
    /// the [`GpuQueryExec`] that reruns the whole plan on the CPU. A distributed session places a
    /// plan already cut into stages this way (`crate::distributed`): a rerun there would be the
    /// coordinator's, over stages already running on workers. Unchanged with `gpu.enable = false`.
    pub fn place_operators(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let cfg = GpuConfig::from_options(config);
        let plan = strip_annotations(plan)?;
        if !cfg.enable {
            return Ok(plan);
        }
        self.place_enabled(plan, config, cfg)
    }

    /// [`Self::place`] over a plan stripped of earlier annotations, with the statistics walk
    /// shared by every operator it places.
    fn place_enabled(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
        cfg: GpuConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        crate::timeline::mark("rule", || "starts".into());
        eligibility::with_shared_statistics(|| self.place(plan, config, cfg))
    }

    /// The rule's work on an enabled session: each eligible operator placed (on the GPU, or kept
    /// on the CPU with its reasons), then the repartitions below GPU joins removed.
    fn place(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
        cfg: GpuConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let listed = match &cfg.devices {
            crate::config::DevicesSetting::List(l) => l.clone(),
            _ => vec![cfg.home_device()],
        };
        let device =
            listed.into_iter().find_map(|o| probe::check_ordinal(o).err()).map(|e| FallbackReason::NoDevice(e.reason));
        // The device memory the GPU operators may hold, to keep joins whose build would not fit
        // on the CPU (only with a device: without one every operator falls back anyway).
        // Opened only for what needs it: the default memory limit, and the cost model's profile.
        // And the fused uploads' price for the host pre-filter (gpu.fuse.host_filter_priced).
        let prices_uploads = cfg.fuse_expressions && cfg.host_filter_priced;
        let needs_gpu = cfg.memory_limit.bytes().is_none() || cfg.placement == PlacementSetting::Cost || prices_uploads;
        let gpu = if device.is_none() && needs_gpu { Gpu::for_config(&cfg).ok() } else { None };
        let memory_limit = match (&device, cfg.memory_limit.bytes()) {
            (Some(_), _) => None,
            (None, Some(limit)) => Some(limit),
            (None, None) => gpu.as_ref().map(|g| g.memory().limit()),
        };
        // The cost model's profile of this device (only with a device and gpu.placement = cost).
        let profile = match (&gpu, cfg.placement) {
            (Some(g), PlacementSetting::Cost) => {
                let devices = g.device_count();
                let mut p = profile::load(g.info(), &cfg.profile_dir).for_devices(devices);
                // With several devices, the copies between them priced at their measured speed.
                if devices > 1 {
                    match crate::device::peer::set_bandwidth(&g.device_set()) {
                        Ok(bandwidth) => p = p.with_peer_bandwidth(bandwidth),
                        Err(e) => log::warn!("pricing copies between devices at the host link's speed: {e}"),
                    }
                }
                Some(Arc::new(p))
            }
            _ => None,
        };
        // The profile that prices fused uploads: the cost model's, or the device's own.
        let own_profile = match (&gpu, &profile, prices_uploads) {
            (Some(g), None, true) => Some(profile::load(g.info(), &cfg.profile_dir)),
            _ => None,
        };
        let upload_profile = profile.as_deref().or(own_profile.as_ref()).filter(|_| prices_uploads);
        let pricing = gpu.as_deref().zip(upload_profile);
        let placer =
            Placer { cfg: &cfg, device, memory_limit, profile: profile.as_ref(), gpu: gpu.as_deref(), pricing };
        // With the table cache, GPU operators read in-memory and Parquet tables' columns on the device,
        // and are placed (and priced) as over a resident table's scan.
        let plan = match (cfg.table_cache && placer.device.is_none(), memory_limit) {
            (true, Some(memory)) => {
                let limit = cfg.table_cache_limit.bytes().unwrap_or(memory / 2);
                cache_table_scans(plan, &cfg, limit)?
            }
            _ => plan,
        };
        let plan = plan.transform_up(|node| placer.place_with_children(node)).map(|t| t.data)?;
        crate::timeline::mark("rule", || "operators placed".into());
        let plan = match cfg.join_repartition {
            true => plan,
            false => {
                let reprice = |g: GpuHashJoinExec, why: repartition::Rebuilt| match profile.as_ref() {
                    Some(p) => costing::reprice_without_repartitions(g, why, &cfg, p, gpu.as_deref()),
                    None => Some(g),
                };
                let plan = repartition::remove_join_repartitions(plan, config, &reprice)?;
                crate::timeline::mark("rule", || "join repartitions removed".into());
                plan
            }
        };
        let plan = match cfg.join_swap_lopsided {
            true => {
                let place = |n: Arc<dyn ExecutionPlan>| placer.place_with_children(n).map(|t| t.data);
                let plan = join_sides::swap_lopsided_joins(plan, config, 10.0 * cfg.min_rows as f64, &place)?;
                crate::timeline::mark("rule", || "lopsided joins swapped".into());
                plan
            }
            false => plan,
        };
        let plan = match cfg.aggregate_split_device_input && cfg.aggregate_exchange {
            true => {
                let place = |n: Arc<dyn ExecutionPlan>| placer.place_with_children(n).map(|t| t.data);
                repartition::split_aggregates_over_device_input(plan, config, &place)?
            }
            false => plan,
        };
        let plan = join_inputs::fuse_join_inputs(plan, &cfg, pricing)?;
        let plan = match placer.device {
            None => device_filters::fuse_filters_over_gpu_output(plan, &cfg)?,
            Some(_) => plan,
        };
        let plan = match placer.device.is_none() && cfg.table_cache_one_partition {
            true => {
                let plan = one_partition::run_cached_regions_in_one_partition(plan)?;
                crate::timeline::mark("rule", || "cached regions in one partition".into());
                plan
            }
            false => plan,
        };
        output_split::mark_hash_splits(plan)
    }
}

/// Whether a parent on the GPU over its join child on the GPU costs less than the parent as
/// placed (on the GPU or not, `parent`) over that join on the CPU: `both` is the parent's
/// verdict with the child on the GPU (no upload of its output), `child` the join's own (whose
/// download a GPU parent does not pay).
fn pair_beats(parent: &Verdict, parent_on_gpu: bool, both: &Verdict, child: &Verdict) -> bool {
    let now = if parent_on_gpu { parent.gpu_total() } else { parent.cpu_total() } + child.cpu_total();
    (both.gpu_total() + child.gpu_compute + child.upload) * child.margin() < now
}

/// Whether the rule placed `plan` on the GPU: a GPU join or aggregate, not the CPU operator
/// annotated with why it stays.
fn on_the_gpu(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let any = plan.as_ref() as &dyn std::any::Any;
    any.downcast_ref::<GpuHashJoinExec>().is_some() || any.downcast_ref::<GpuAggregateExec>().is_some()
}

/// `node` with its child `i` replaced by `child`, its properties recomputed.
fn with_child(
    node: &Arc<dyn ExecutionPlan>,
    i: usize,
    child: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    children[i] = child;
    Arc::clone(node).replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
}

/// An operator as the rule placed it, with the cost model's verdict when the model priced it.
struct Placed {
    plan: Arc<dyn ExecutionPlan>,
    verdict: Option<Verdict>,
}

/// What placing an operator takes: the settings, why there is no device (when there is none),
/// the memory limit that sends joins out of core, and the cost model's profile (with
/// `gpu.placement = cost` and a device).
struct Placer<'a> {
    cfg: &'a GpuConfig,
    device: Option<FallbackReason>,
    memory_limit: Option<u64>,
    profile: Option<&'a Arc<Profile>>,
    /// The device, when the rule opened it: the cost model prices uploads from its pinned memory.
    gpu: Option<&'a Gpu>,
    /// The device and profile that price fused uploads for the host pre-filter
    /// (`gpu.fuse.host_filter_priced`; see [`crate::exec::fuse::FusedInput::priced`]).
    pricing: Option<(&'a Gpu, &'a Profile)>,
}

impl Placer<'_> {
    /// `node` placed ([`Placer::place`]), then each child of it that is a join the model left on
    /// the CPU moved to the GPU when the two on the GPU cost less than as placed. A join is
    /// priced on its own as if a CPU operator read its output (its download counted), and a
    /// GPU parent of a CPU join pays the upload of that join's output; a GPU parent reads a GPU
    /// join's output on the device and pays neither.
    fn place_with_children(&self, node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
        let Some(mut placed) = self.place(Arc::clone(&node))? else { return Ok(Transformed::no(node)) };
        let Some(profile) = self.profile else { return Ok(Transformed::yes(placed.plan)) };
        let mut node = node;
        for i in 0..node.children().len() {
            let Some(here) = placed.verdict.clone() else { break };
            let Some((gpu_child, child)) = self.gpu_join_below(&node, i, profile)? else { continue };
            let moved = with_child(&node, i, gpu_child)?;
            let Some(both) = self.place(Arc::clone(&moved))? else { continue };
            let Some(v) = &both.verdict else { continue };
            let on_gpu = on_the_gpu(&placed.plan);
            let beats = on_the_gpu(&both.plan) && pair_beats(&here, on_gpu, v, &child);
            log::debug!(
                "{} over a CPU-kept join (child {i}): as placed {} + join on the CPU {}; both on the GPU {} + join {}: {}",
                node.name(),
                fmt_seconds(if on_gpu { here.gpu_total() } else { here.cpu_total() }),
                fmt_seconds(child.cpu_total()),
                fmt_seconds(v.gpu_total()),
                fmt_seconds(child.gpu_compute + child.upload),
                if beats { "moved" } else { "kept" }
            );
            if beats {
                node = moved;
                placed = both;
            }
        }
        Ok(Transformed::yes(placed.plan))
    }

    /// Child `i` of `node` as [`Placer::gpu_join`] moves it to the GPU, with its verdict: the
    /// child itself, or, with `gpu.cost.join_chain_pricing`, a CPU-kept join under the exchange a GPU
    /// join drops when `node` is a join (the hash repartition of a Partitioned join's input, the
    /// coalesce of a CollectLeft build), kept around the moved join as the plan has it.
    fn gpu_join_below(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        i: usize,
        profile: &Arc<Profile>,
    ) -> Result<Option<(Arc<dyn ExecutionPlan>, Verdict)>> {
        let side = node.children()[i];
        if let Some(moved) = self.gpu_join(side, profile) {
            return Ok(Some(moved));
        }
        let Some(join) = node.downcast_ref::<HashJoinExec>().filter(|_| self.cfg.join_chain_pricing) else {
            return Ok(None);
        };
        let below = match join.partition_mode() {
            PartitionMode::Partitioned => removable_repartition(side).map(|r| r.input()),
            _ if i == 0 => gathered_input(side),
            _ => None,
        };
        let Some((gpu_below, verdict)) = below.and_then(|b| self.gpu_join(b, profile)) else { return Ok(None) };
        Ok(Some((with_child(side, 0, gpu_below)?, verdict)))
    }

    /// A join that the model alone kept on the CPU (`placed` is its annotation with no other
    /// reason), on the GPU instead, with the model's verdict on `profile`. With
    /// `gpu.cost.join_chain_pricing`, each CPU-kept join it reads (see [`Placer::gpu_join_below`])
    /// moves with it when the two cost less on the GPU, this join reading that one's output on
    /// the device, than this one on the GPU over that one on the CPU; the verdict then counts
    /// the moved joins' GPU time and uploads on the GPU side and their CPU time on the CPU side.
    fn gpu_join(
        &self,
        placed: &Arc<dyn ExecutionPlan>,
        profile: &Arc<Profile>,
    ) -> Option<(Arc<dyn ExecutionPlan>, Verdict)> {
        // `downcast_ref` sees through a CpuFallbackExec to its child: ask `Any` directly.
        let any = placed.as_ref() as &dyn std::any::Any;
        let fallback = any.downcast_ref::<CpuFallbackExec>()?;
        if !matches!(fallback.reasons(), [FallbackReason::Cost(_)]) {
            return None;
        }
        let mut node = Arc::clone(fallback.children()[0]);
        let join = node.downcast_ref::<HashJoinExec>()?;
        // Out-of-core joins keep their own pricing.
        if self.memory_limit.and_then(|limit| eligibility::build_memory_reason(join, limit)).is_some() {
            return None;
        }
        let price = |n: &Arc<dyn ExecutionPlan>| {
            let g = GpuHashJoinExec::try_new(Arc::clone(n), self.cfg).ok()?;
            let e = costing::join_estimate(&g, n, self.cfg, profile, None, self.gpu)?;
            Some((g, e))
        };
        let (mut g, mut e) = price(&node)?;
        // The CPU side as placed (the joins below on the CPU), and the GPU time and uploads of
        // the joins moved below.
        let mut verdict = e.verdict.clone();
        let (mut below_gpu, mut below_upload) = (0.0, 0.0);
        if self.cfg.join_chain_pricing {
            for i in 0..node.children().len() {
                let Ok(Some((side, v))) = self.gpu_join_below(&node, i, profile) else { continue };
                let Ok(moved) = with_child(&node, i, side) else { continue };
                let Some((g2, e2)) = price(&moved) else { continue };
                let apart = e.verdict.gpu_compute + e.verdict.upload + v.cpu_total();
                let together = e2.verdict.gpu_compute + e2.verdict.upload + v.gpu_compute + v.upload;
                log::debug!(
                    "join chain: HashJoinExec over a CPU-kept join (child {i}): apart {}, together {}",
                    fmt_seconds(apart),
                    fmt_seconds(together)
                );
                if together * v.margin() < apart {
                    verdict.cpu += v.cpu_total();
                    below_gpu += v.gpu_compute;
                    below_upload += v.upload;
                    (node, g, e) = (moved, g2, e2);
                }
            }
        }
        verdict.gpu_compute = e.verdict.gpu_compute + below_gpu;
        verdict.upload = e.verdict.upload + below_upload;
        verdict.download = e.verdict.download;
        Some((Arc::new(g.with_estimate(e).for_gpu_parent()), verdict))
    }

    /// `node` placed: a GPU exec, or the CPU operator annotated with why it stays; `None` for an
    /// operator the rule does not place.
    fn place(&self, node: Arc<dyn ExecutionPlan>) -> Result<Option<Placed>> {
        // A join whose build would not fit runs out of core when it can (issue: Triton join).
        let mut over_limit = None;
        let mut verdict = None;
        // Every input already on the device (`gpu.cost.resident_inputs`): neither min_rows nor
        // the model's comparison with the CPU places it.
        let resident = self.device.is_none() && self.cfg.resident_inputs && costing::inputs_on_device(&node, self.cfg);
        let min_rows = if resident { 0 } else { self.cfg.min_rows };
        let mut reasons = if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            over_limit = self.memory_limit.and_then(|limit| eligibility::build_memory_reason(join, limit));
            eligibility::join_reasons(join, min_rows)
        } else if let Some(agg) = node.downcast_ref::<AggregateExec>() {
            eligibility::aggregate_reasons(agg, min_rows)
        } else {
            return Ok(None);
        };
        if let Some(d) = &self.device {
            reasons.insert(0, d.clone());
        }
        let replaced: Result<Arc<dyn ExecutionPlan>> = if node.downcast_ref::<HashJoinExec>().is_some() {
            if !reasons.is_empty() {
                return Ok(Some(Placed { plan: Arc::new(CpuFallbackExec::new(node, reasons)), verdict: None }));
            }
            GpuHashJoinExec::try_new(Arc::clone(&node), self.cfg).map(|g| {
                let g = match (&over_limit, g.no_spill_reason()) {
                    (Some(over), None) => g.with_out_of_core(eligibility::out_of_core_note(over)),
                    (Some(over), Some(why)) => {
                        reasons.push(over.clone());
                        reasons.push(FallbackReason::Unsupported(format!("it cannot run out of core: {why}")));
                        g
                    }
                    (None, _) => g,
                };
                let limit = over_limit.as_ref().and(self.memory_limit);
                let estimate =
                    self.profile.and_then(|p| costing::join_estimate(&g, &node, self.cfg, p, limit, self.gpu));
                verdict = estimate.as_ref().map(|e| e.verdict.clone());
                Arc::new(priced(g, estimate, GpuHashJoinExec::with_estimate, resident, &mut reasons)) as _
            })
        } else {
            // The aggregate's own checks run with or without a device, so EXPLAIN names them.
            GpuAggregateExec::try_new(Arc::clone(&node), self.cfg).map(|g| {
                let estimate = match (self.profile, reasons.is_empty()) {
                    (Some(p), true) => costing::aggregate_estimate(&g, self.cfg, p),
                    _ => None,
                };
                verdict = estimate.as_ref().map(|e| e.verdict.clone());
                // An input size taken from the plan's shape (a join's output: DataFusion
                // has no estimate; see `likely_rows`) prices the CPU-kept joins below the
                // aggregate (`place_with_children`), but neither places the aggregate,
                // which runs on the GPU as an unpriced one does, nor chooses its
                // algorithm: a guess of the rows, and one group per row, is too loose for
                // either.
                let estimate = estimate.filter(|e| !e.bounded);
                let g = priced(g, estimate, GpuAggregateExec::with_estimate, resident, &mut reasons);
                let g = if reasons.is_empty() && self.cfg.fuse_expressions {
                    let g = g.with_fused_input(self.cfg.fuse_filters);
                    match self.pricing {
                        Some((gpu, p)) => g.with_priced_upload(self.cfg, gpu, p),
                        None => g,
                    }
                } else {
                    g
                };
                // A Final above a GPU Partial merges its states on the device (the
                // Partial was replaced first: the rule works bottom-up).
                let g = if reasons.is_empty() && self.cfg.aggregate_exchange {
                    g.with_exchange(self.cfg.aggregate_exchange_host_input)
                } else {
                    g
                };
                Arc::new(g) as _
            })
        };
        match replaced {
            Ok(gpu) if reasons.is_empty() => return Ok(Some(Placed { plan: gpu, verdict })),
            Ok(_) => {}
            Err(e) => reasons.push(FallbackReason::Unsupported(crate::error::reason(&e))),
        }
        Ok(Some(Placed { plan: Arc::new(CpuFallbackExec::new(node, reasons)), verdict }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::session::gpu_session_context;

    fn table(rows: i64) -> Arc<MemTable> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64))),
                Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("s{}", i % 7)))),
            ],
        )
        .unwrap();
        Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap())
    }

    async fn ctx_with_tables(config: SessionConfig) -> SessionContext {
        let ctx = gpu_session_context(config.with_target_partitions(2));
        ctx.register_table("a", table(50)).unwrap();
        ctx.register_table("b", table(20)).unwrap();
        ctx
    }

    async fn physical_plan(ctx: &SessionContext, sql: &str) -> String {
        let df = ctx.sql(sql).await.unwrap();
        let plan = df.create_physical_plan().await.unwrap();
        displayable(plan.as_ref()).indent(true).to_string()
    }

    /// A join that loses on its own by its download can win under a GPU parent, which reads
    /// its output on the device; the parent's upload of a CPU child's output counts too.
    #[test]
    fn a_join_under_a_gpu_parent_is_priced_without_its_download() {
        let v = |gpu_compute: f64, upload: f64, download: f64, cpu: f64| Verdict {
            gpu_compute,
            upload,
            download,
            cpu,
            cpu_download: 0.0,
            cpu_exchange: 0.0,
            min_speedup: 1.0,
        };
        // The join alone: 1 + 1 + 4 = 6 ms on the GPU against 5 on the CPU.
        let child = v(1.0, 1.0, 4.0, 5.0);
        assert!(!child.gpu_wins());
        // Its GPU parent uploads its output (3 ms) when it stays on the CPU: 2 + 3 + 1 + 5 = 11;
        // both on the GPU: 2 + 0 + 1 + 1 + 1 = 5.
        let parent = v(2.0, 3.0, 1.0, 20.0);
        let both = v(2.0, 0.0, 1.0, 20.0);
        assert!(pair_beats(&parent, true, &both, &child));
        // A parent on the CPU (its CPU 6 ms) with the join on the CPU: 11; both on the GPU: 5.
        assert!(pair_beats(&v(2.0, 3.0, 1.0, 6.0), false, &both, &child));
        // A join far cheaper on the CPU stays there: 6 + 0.5 = 6.5 against 3 + 3 + 1 = 7.
        let cheap = v(3.0, 1.0, 4.0, 0.5);
        assert!(!pair_beats(&parent, true, &both, &cheap));
        // Both cheap on the CPU stay there: 0.1 + 3 = 3.1 against 3 + 1 + 1 = 5.
        assert!(!pair_beats(&v(2.0, 3.0, 1.0, 0.1), false, &both, &v(1.0, 1.0, 4.0, 3.0)));
    }

    const JOIN_AGG: &str = "SELECT a.s, count(*), sum(b.f) FROM a JOIN b ON a.k = b.k GROUP BY a.s";

    /// The rule over `sql` on tables `a` (`build` rows) and `b` (`probe` rows) of two Int64
    /// columns in 16 partitions, placed with the H100's built-in profile as if a device were
    /// there (no device is opened, no kernel runs), and the plan's text.
    async fn placed_with_h100_profile(sql: &str, build: i64, probe: i64, cfg: &GpuConfig) -> String {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(16));
        ctx.register_table("a", crate::testing::memory_kv_table(build, 16)).unwrap();
        ctx.register_table("b", crate::testing::memory_kv_table(probe, 16)).unwrap();
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let profile = Arc::new(Profile::h100());
        let placer =
            Placer { cfg, device: None, memory_limit: None, profile: Some(&profile), gpu: None, pricing: None };
        let plan = plan.transform_up(|n| placer.place_with_children(n)).map(|t| t.data).unwrap();
        displayable(plan.as_ref()).indent(true).to_string()
    }

    /// A join the model keeps on the CPU by its own estimate moves to the GPU under a GPU
    /// aggregate when the two cost less on the device than the join on the CPU plus the upload
    /// of its output, whose size DataFusion cannot estimate and the plan's shape gives; a small
    /// join stays. Without `gpu.cost.aggregate_join_pricing` the aggregate is unpriced and the join
    /// is priced alone.
    #[tokio::test]
    async fn aggregates_price_the_cpu_kept_joins_below_them() {
        let sql = "SELECT b.v, min(a.v), max(b.k) FROM a JOIN b ON a.k = b.k GROUP BY b.v";
        let cfg = GpuConfig::default();
        let join_on_gpu = |plan: &str| plan.contains("GpuHashJoinExec");
        let (build, probe) = (100_000, 8_000_000);
        let big = placed_with_h100_profile(sql, build, probe, &cfg).await;
        assert!(big.contains("GpuAggregateExec: mode=Partial"), "{big}");
        assert!(join_on_gpu(&big), "{big}");
        let off = GpuConfig { aggregate_join_pricing: false, ..GpuConfig::default() };
        let alone = placed_with_h100_profile(sql, build, probe, &off).await;
        assert!(!join_on_gpu(&alone), "{alone}");
        let small = placed_with_h100_profile(sql, build / 100, probe / 100, &cfg).await;
        assert!(!join_on_gpu(&small), "{small}");
    }

    #[tokio::test]
    async fn explain_shows_why_joins_and_aggregates_stay_on_cpu() {
        let _g = crate::testing::gpu_lock();
        let ctx = ctx_with_tables(SessionConfig::new()).await;
        // (Over DataFusion's scans: over the table cache's, the inputs are on the device and the
        // operators go there whatever their size.)
        ctx.sql("SET gpu.table_cache = false").await.unwrap().collect().await.unwrap();
        let plan = physical_plan(&ctx, JOIN_AGG).await;
        assert!(plan.contains("CpuFallbackExec: HashJoinExec stays on the CPU"), "{plan}");
        assert!(plan.contains("below gpu.cost.min_rows = 100000"), "{plan}");
        if probe::device_count().is_err() {
            assert!(plan.contains("no GPU ("), "{plan}");
            assert!(plan.contains("CpuFallbackExec: AggregateExec stays on the CPU"), "{plan}");
        }
        // Every join and aggregate is on the GPU or annotated exactly once. (The aggregates'
        // input size is unknown here, so with a GPU they run there.)
        let annotated = plan.matches("CpuFallbackExec").count();
        let on_gpu = plan.matches("GpuAggregateExec: ").count() + plan.matches("GpuHashJoinExec: ").count();
        let operators = plan.matches("HashJoinExec: ").count() + plan.matches("AggregateExec: ").count();
        assert_eq!(annotated + on_gpu, operators, "{plan}");

        // EXPLAIN through SQL shows the same.
        let batches = ctx.sql(&format!("EXPLAIN {JOIN_AGG}")).await.unwrap().collect().await.unwrap();
        let text = pretty_format_batches(&batches).unwrap().to_string();
        assert!(text.contains("CpuFallbackExec"), "{text}");
    }

    #[tokio::test]
    async fn options_are_settable_with_set() {
        let _g = crate::testing::gpu_lock();
        let ctx = ctx_with_tables(SessionConfig::new().with_information_schema(true)).await;
        ctx.sql("SET gpu.cost.min_rows = 10").await.unwrap().collect().await.unwrap();
        let plan = physical_plan(&ctx, JOIN_AGG).await;
        assert!(!plan.contains("below gpu.cost.min_rows"), "{plan}");

        ctx.sql("SET gpu.enable = false").await.unwrap().collect().await.unwrap();
        let plan = physical_plan(&ctx, JOIN_AGG).await;
        assert!(!plan.contains("CpuFallbackExec"), "{plan}");

        ctx.sql("SET gpu.memory.limit = '2G'").await.unwrap().collect().await.unwrap();
        let cfg = GpuConfig::from_options(ctx.state().config_options());
        assert_eq!(cfg.memory_limit.bytes(), Some(2 << 30));
        assert!(ctx.sql("SET gpu.memory.limit = 'lots'").await.is_err());
        assert!(ctx.sql("SET gpu.no_such_option = 1").await.is_err());

        // Extension options are listed with DataFusion's own settings.
        let shown = ctx
            .sql("SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'gpu.%' ORDER BY name")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = pretty_format_batches(&shown).unwrap().to_string();
        for expected in ["| gpu.cost.min_rows ", "| 10 ", "| gpu.memory.limit ", "| 2GiB ", "| gpu.enable "] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }

    /// A join whose build side would not fit under gpu.memory.limit runs out of core (EXPLAIN
    /// says so), stays within the limit and answers as the CPU does; a join that cannot run out
    /// of core (NOT IN) stays on the CPU and says why.
    #[tokio::test]
    async fn joins_over_the_memory_limit_run_out_of_core() {
        let _g = crate::testing::gpu_lock();
        let Some(gpu) = crate::testing::gpu_or_skip("joins_over_the_memory_limit_run_out_of_core") else { return };
        let config = SessionConfig::new().with_target_partitions(2);
        let ctx = gpu_session_context(config.clone());
        ctx.register_table("a", table(300_000)).unwrap();
        ctx.register_table("b", table(300_000)).unwrap();
        ctx.sql("SET gpu.cost.min_rows = 0").await.unwrap().collect().await.unwrap();
        ctx.sql("SET gpu.placement = 'always'").await.unwrap().collect().await.unwrap();
        let cpu = SessionContext::new_with_config(config);
        cpu.register_table("a", table(300_000)).unwrap();
        cpu.register_table("b", table(300_000)).unwrap();
        // No aggregate: at 2 MiB the GPU aggregate would fail at run time (its memory follows
        // gpu.batch_rows, not its input, so it has no plan-time check).
        let sql = "SELECT a.k, b.f FROM a JOIN b ON a.k = b.k ORDER BY a.k DESC, b.f LIMIT 5";
        let not_in = "SELECT a.k FROM a WHERE a.k NOT IN (SELECT k FROM b WHERE k > 5) ORDER BY a.k LIMIT 5";
        let plan = physical_plan(&ctx, sql).await;
        assert!(plan.contains("GpuHashJoinExec") && !plan.contains("out_of_core"), "{plan}");
        ctx.sql("SET gpu.memory.limit = '2M'").await.unwrap().collect().await.unwrap();
        let plan = physical_plan(&ctx, sql).await;
        assert!(plan.contains("GpuHashJoinExec") && plan.contains("out_of_core=[build about"), "{plan}");
        let plan = physical_plan(&ctx, not_in).await;
        assert!(plan.contains("over gpu.memory.limit") && plan.contains("cannot run out of core"), "{plan}");
        // (The peak is the device's: without the columns other tests left in the table cache.)
        crate::columns::cache::TableCache::of_device(gpu.info().ordinal).clear();
        for q in [sql, not_in] {
            gpu.memory().reset_peak();
            let got = pretty_format_batches(&ctx.sql(q).await.unwrap().collect().await.unwrap()).unwrap().to_string();
            assert!(gpu.memory().peak() <= 2 << 20, "peak {} over the limit", gpu.memory().peak());
            let want = pretty_format_batches(&cpu.sql(q).await.unwrap().collect().await.unwrap()).unwrap().to_string();
            assert_eq!(got, want, "{q}");
        }
        // Leave the shared device's budget as the default configuration sets it.
        ctx.sql("SET gpu.memory.limit = 'auto'").await.unwrap().collect().await.unwrap();
        let _ = physical_plan(&ctx, sql).await;
    }

    /// A join takes its inputs pipelined (build batches uploaded as they arrive, the probe
    /// read ahead) or blocking (both received whole first; `gpu.join.pipelined_inputs`), and
    /// gives DataFusion's answers either way, for every join type, one shared build or one per
    /// partition, over keys with duplicates and nulls; EXPLAIN ANALYZE shows its input times.
    #[tokio::test]
    async fn joins_answer_alike_with_pipelined_and_blocking_inputs() {
        use rand::{Rng, SeedableRng};
        let _g = crate::testing::gpu_lock();
        let test = "joins_answer_alike_with_pipelined_and_blocking_inputs";
        let Some(_gpu) = crate::testing::gpu_or_skip(test) else { return };
        let mut rng = rand::rngs::StdRng::seed_from_u64(crate::testing::fresh_seed(test));
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, false),
        ]));
        let mut keyed = |rows: usize| -> Arc<MemTable> {
            let parts = (0..4)
                .map(|_| {
                    let k: Vec<Option<i64>> = (0..rows / 4)
                        .map(|_| {
                            let key = rng.random_range(0..rows as i64 / 3);
                            rng.random_bool(0.95).then_some(key)
                        })
                        .collect();
                    let v: Vec<i64> = (0..rows / 4).map(|_| rng.random_range(0..1000i64)).collect();
                    let b = RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![Arc::new(Int64Array::from_iter(k)), Arc::new(Int64Array::from_iter_values(v))],
                    )
                    .unwrap();
                    vec![b]
                })
                .collect();
            Arc::new(MemTable::try_new(Arc::clone(&schema), parts).unwrap())
        };
        let (a, b) = (keyed(200_000), keyed(300_000));
        let config = SessionConfig::new().with_target_partitions(4);
        let cpu = SessionContext::new_with_config(config.clone());
        let gpu = gpu_session_context(config);
        for ctx in [&cpu, &gpu] {
            ctx.register_table("a", Arc::clone(&a) as _).unwrap();
            ctx.register_table("b", Arc::clone(&b) as _).unwrap();
        }
        let set = |ctx: &SessionContext, sql: String| {
            let ctx = ctx.clone();
            async move { ctx.sql(&sql).await.unwrap().collect().await.unwrap() }
        };
        set(&gpu, "SET gpu.cost.min_rows = 0".into()).await;
        set(&gpu, "SET gpu.placement = 'always'".into()).await;
        let queries = [
            "SELECT count(*), sum(a.v), sum(b.v) FROM a JOIN b ON a.k = b.k",
            "SELECT count(*), sum(a.v), sum(b.v), count(b.k) FROM a LEFT JOIN b ON a.k = b.k",
            "SELECT count(*), sum(a.v), sum(b.v), count(a.k) FROM a RIGHT JOIN b ON a.k = b.k",
            "SELECT count(*), sum(a.v), sum(b.v), count(a.k), count(b.k) FROM a FULL JOIN b ON a.k = b.k",
            "SELECT count(*), sum(v) FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
            "SELECT count(*), sum(v) FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
        ];
        // A shared build (CollectLeft) and one build per partition (Partitioned).
        let modes = [("100000000", "CollectLeft"), ("0", "Partitioned")];
        for (threshold, mode) in modes {
            for ctx in [&cpu, &gpu] {
                for key in ["hash_join_single_partition_threshold", "hash_join_single_partition_threshold_rows"] {
                    set(ctx, format!("SET datafusion.optimizer.{key} = {threshold}")).await;
                }
            }
            for q in queries {
                let want = pretty_format_batches(&set(&cpu, q.to_string()).await).unwrap().to_string();
                for pipelined in [true, false] {
                    set(&gpu, format!("SET gpu.join.pipelined_inputs = {pipelined}")).await;
                    let plan = physical_plan(&gpu, q).await;
                    assert!(plan.contains("GpuHashJoinExec"), "{mode}: {plan}");
                    let got = pretty_format_batches(&set(&gpu, q.to_string()).await).unwrap().to_string();
                    assert_eq!(got, want, "{q} ({mode}, pipelined_inputs = {pipelined})");
                }
            }
        }
        let analyzed = set(&gpu, format!("EXPLAIN ANALYZE {}", queries[0])).await;
        let text = pretty_format_batches(&analyzed).unwrap().to_string();
        for metric in ["input_wait_time=", "probe_input_at=", "build_input_at=", "done_at="] {
            assert!(text.contains(metric), "{metric} missing: {text}");
        }
    }

    #[tokio::test]
    async fn unsupported_key_types_and_expressions_are_named() {
        let _g = crate::testing::gpu_lock();
        let ctx = ctx_with_tables(SessionConfig::new()).await;
        let plan = physical_plan(&ctx, "SELECT count(*) FROM a JOIN b ON a.f = b.f").await;
        assert!(plan.contains("has unsupported type Float64"), "{plan}");
        assert_eq!(plan.matches("has unsupported type Float64").count(), 1, "each reason once: {plan}");
        let plan = physical_plan(&ctx, "SELECT f, count(*) FROM a GROUP BY f").await;
        assert!(plan.contains("group key `f"), "{plan}");
        let plan = physical_plan(&ctx, "SELECT k, stddev(f) FROM a GROUP BY k").await;
        assert!(plan.contains("aggregate function `stddev"), "{plan}");
    }

    #[tokio::test]
    async fn annotated_plans_give_the_same_answers() {
        let _g = crate::testing::gpu_lock();
        let gpu = ctx_with_tables(SessionConfig::new()).await;
        let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        cpu.register_table("a", table(50)).unwrap();
        cpu.register_table("b", table(20)).unwrap();
        let sql = format!("{JOIN_AGG} ORDER BY a.s");
        let x = pretty_format_batches(&gpu.sql(&sql).await.unwrap().collect().await.unwrap()).unwrap().to_string();
        let y = pretty_format_batches(&cpu.sql(&sql).await.unwrap().collect().await.unwrap()).unwrap().to_string();
        assert_eq!(x, y);
    }

    #[tokio::test]
    async fn running_the_rule_twice_annotates_once() {
        let _g = crate::testing::gpu_lock();
        let ctx = ctx_with_tables(SessionConfig::new()).await;
        let plan = ctx.sql(JOIN_AGG).await.unwrap().create_physical_plan().await.unwrap();
        let again = GpuOptimizerRule::new().optimize(Arc::clone(&plan), ctx.state().config_options()).unwrap();
        assert_eq!(
            displayable(plan.as_ref()).indent(true).to_string(),
            displayable(again.as_ref()).indent(true).to_string()
        );
    }
}
