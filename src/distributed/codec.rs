//! The `PhysicalExtensionCodec` of the GPU execs: a plan holding them to bytes and back
//! (`datafusion-proto`), as a distributed engine sends a stage's plan to a worker.
//!
//! A GPU exec is sent as the DataFusion node it replaces plus what the rule decided for it; the
//! node's children are the exec's, which `datafusion-proto` sends itself. Decoding builds the
//! GPU exec again in the receiving process, for its own device and `gpu.*` settings:
//!
//! - a [`GpuHashJoinExec`]: its `HashJoinExec` (sent with placeholder children) and its
//!   [`JoinDecisions`]; the estimate is priced again under the receiving device's profile. A
//!   process without a usable device gets the `HashJoinExec` in a [`CpuFallbackExec`] that says
//!   why.
//! - a [`GpuAggregateExec`]: its `AggregateExec` over the filters and projections it fused (a
//!   placeholder below them) and its [`AggregateDecisions`]; the fused input is taken in again
//!   and its upload priced on the receiving device. One that merges its Partial stage on the
//!   device (`gpu.aggregate.exchange`) is not sent: a distributed plan keeps a shuffle there.
//! - a [`GpuFilterProjectExec`]: its filters and projections over a placeholder.
//! - a [`GpuUploadExec`]: nothing but itself; without a device its input as it is.
//! - a [`StageClockExec`] (the time a stage takes): nothing but itself.
//!
//! Without a usable device, or where the receiving settings do not let the GPU exec be built
//! again, each comes back as its DataFusion nodes, the top one in a [`CpuFallbackExec`] that says
//! why: the stage runs on the CPU rather than fails. A [`CpuFallbackExec`] itself never reaches the codec:
//! DataFusion sees through it (its downcasts reach the CPU node it wraps), so the CPU node is
//! sent, without the reasons. The table cache's and resident tables' scans are not carried:
//! encoding one fails with its name (a distributed session turns the table cache off).

use std::any::Any;
use std::sync::Arc;

use datafusion::common::{internal_err, not_impl_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalPlanNode;
use prost::Message;
use serde::{Deserialize, Serialize};

use super::stage_clock::StageClockExec;
use crate::config::GpuConfig;
use crate::cost::profile;
use crate::device::Gpu;
use crate::exec::aggregate::AggregateDecisions;
use crate::exec::fallback::FallbackReason;
use crate::exec::fuse::FusedInput;
use crate::exec::join::JoinDecisions;
use crate::exec::upload::GpuUploadExec;
use crate::exec::{CpuFallbackExec, GpuAggregateExec, GpuFilterProjectExec, GpuHashJoinExec};

/// Encodes and decodes the GPU execs of a physical plan (see the module's text). Register it as
/// the user codec of a distributed session and of its workers.
#[derive(Debug, Default, Clone, Copy)]
pub struct GpuPlanCodec;

/// What a GPU exec is sent as.
#[derive(Debug, Serialize, Deserialize)]
enum Encoded {
    /// A GPU join: its `HashJoinExec` (a `PhysicalPlanNode` with placeholder children) and what
    /// the rule decided for it.
    Join { node: Vec<u8>, decisions: JoinDecisions },
    /// A GPU aggregate: its `AggregateExec` over the chain it fused, down to a placeholder for
    /// its input; whether that chain holds filters (the fusion is taken in again with them) and
    /// whether its upload was priced.
    Aggregate { node: Vec<u8>, decisions: AggregateDecisions, filters: bool, priced: bool },
    /// Filters and projections on the GPU: the chain's top node, down to a placeholder.
    FilterProject { node: Vec<u8>, filters: bool, priced: bool },
    /// An upload to the device.
    Upload,
    /// A stage's clock (see `crate::distributed::stage_clock`).
    StageClock,
}

/// Whether a fusion's chain holds a filter (it was taken in with `gpu.fuse.filters`).
fn has_filters(fused: &FusedInput) -> bool {
    fused.chain.iter().any(|n| n.name() == "FilterExec")
}

/// A placeholder of `input`'s schema, for the input of a node sent with its fused chain.
fn placeholder(input: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    Arc::new(EmptyExec::new(input.schema()))
}

/// `plan` (a chain of one-child nodes down to one placeholder leaf) over `input` in place of that
/// leaf, each node's properties recomputed.
fn over_input(plan: Arc<dyn ExecutionPlan>, input: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    match plan.children().as_slice() {
        [] => Ok(Arc::clone(input)),
        [child] => {
            let child = over_input(Arc::clone(child), input)?;
            plan.replace_children(vec![child], recompute())
        }
        more => internal_err!("a fused chain's {} has {} children, not one", plan.name(), more.len()),
    }
}

/// `node` (the DataFusion nodes of a GPU exec) on the CPU of a process whose device cannot be
/// used, with why.
fn without_device(node: Arc<dyn ExecutionPlan>, why: &DataFusionError) -> Arc<dyn ExecutionPlan> {
    Arc::new(CpuFallbackExec::new(node, vec![FallbackReason::NoDevice(why.to_string())]))
}

/// `node` (the DataFusion nodes of a GPU exec) on the CPU of a process that could not build the
/// GPU exec again under its own settings, with why: the stage runs, as DataFusion would run it.
fn not_rebuilt(node: Arc<dyn ExecutionPlan>, why: impl std::fmt::Display) -> Arc<dyn ExecutionPlan> {
    let reason = format!("the GPU exec sent for it could not be built again on this worker: {why}");
    Arc::new(CpuFallbackExec::new(node, vec![FallbackReason::Unsupported(reason)]))
}

/// The one input a node was sent with.
fn single(inputs: &[Arc<dyn ExecutionPlan>], what: &str) -> Result<Arc<dyn ExecutionPlan>> {
    match inputs {
        [input] => Ok(Arc::clone(input)),
        _ => internal_err!("a {what} was sent with {} inputs, not one", inputs.len()),
    }
}

/// Whether the fusion a rebuilt exec took in reads `input` (the node it was sent over): the
/// receiving settings took in the chain that was sent.
fn reads(fused: Option<&FusedInput>, input: &Arc<dyn ExecutionPlan>) -> bool {
    fused.is_some_and(|f| std::ptr::eq(Arc::as_ptr(&f.input) as *const (), Arc::as_ptr(input) as *const ()))
}

/// New children recompute a node's properties (its partitioning follows them).
fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
}

/// `node` (a DataFusion node a GPU exec replaces) as bytes, its children replaced by empty
/// placeholders of their schemas: the GPU exec's children travel as the plan's own.
fn wrapped_to_bytes(
    node: &Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Vec<u8>> {
    let placeholders = node.children().into_iter().map(placeholder).collect();
    let bare = Arc::clone(node).replace_children(placeholders, recompute())?;
    plan_to_bytes(&bare, codec, converter)
}

/// `plan` as `datafusion-proto` bytes.
fn plan_to_bytes(
    plan: &Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Vec<u8>> {
    Ok(converter.execution_plan_to_proto(plan, codec)?.encode_to_vec())
}

/// The plan [`plan_to_bytes`] sent.
fn plan_from_bytes(
    bytes: &[u8],
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Arc<dyn ExecutionPlan>> {
    let proto = PhysicalPlanNode::decode(bytes)
        .map_err(|e| DataFusionError::Internal(format!("a GPU exec's node does not decode: {e}")))?;
    converter.proto_to_execution_plan(&proto, &PhysicalPlanDecodeContext::new(ctx, codec))
}

/// The node [`wrapped_to_bytes`] sent, over `inputs` (the decoded children) in place of its
/// placeholders.
fn wrapped_from_bytes(
    bytes: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Arc<dyn ExecutionPlan>> {
    let bare = plan_from_bytes(bytes, ctx, codec, converter)?;
    if bare.children().len() != inputs.len() {
        return internal_err!(
            "a GPU exec's {} has {} children, but {} inputs were sent with it",
            bare.name(),
            bare.children().len(),
            inputs.len()
        );
    }
    bare.replace_children(inputs.to_vec(), recompute())
}

impl PhysicalExtensionCodec for GpuPlanCodec {
    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let any: &dyn Any = node.as_ref();
        let encoded = if let Some(join) = any.downcast_ref::<GpuHashJoinExec>() {
            Encoded::Join { node: wrapped_to_bytes(join.original(), self, converter)?, decisions: join.decisions() }
        } else if let Some(agg) = any.downcast_ref::<GpuAggregateExec>() {
            let decisions = agg.decisions()?;
            let input = single(&agg.children().into_iter().cloned().collect::<Vec<_>>(), "GpuAggregateExec")?;
            let bare = agg.over_inputs(vec![placeholder(&input)])?;
            let fused = agg.fused_input();
            Encoded::Aggregate {
                node: plan_to_bytes(bare.original(), self, converter)?,
                decisions,
                filters: fused.is_some_and(has_filters),
                priced: fused.is_some_and(|f| f.upload_ns_per_row.is_some()),
            }
        } else if let Some(fp) = any.downcast_ref::<GpuFilterProjectExec>() {
            let fused = fp.fused();
            let bare = fused.over(placeholder(&fused.input))?;
            let Some(top) = bare.chain.first() else {
                return internal_err!("a GpuFilterProjectExec with no filters or projections");
            };
            Encoded::FilterProject {
                node: plan_to_bytes(top, self, converter)?,
                filters: has_filters(fused),
                priced: fused.upload_ns_per_row.is_some(),
            }
        } else if any.is::<GpuUploadExec>() {
            Encoded::Upload
        } else if any.is::<StageClockExec>() {
            Encoded::StageClock
        } else {
            return not_impl_err!(
                "{} cannot be sent to another process (the GPU codec carries the GPU joins, aggregates, filters and projections, and uploads; a distributed session turns the table cache off)",
                node.name()
            );
        };
        serde_json::to_writer(buf, &encoded)
            .map_err(|e| DataFusionError::Internal(format!("encoding {}: {e}", node.name())))
    }

    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let encoded: Encoded = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Internal(format!("a GPU exec does not decode: {e}")))?;
        let cfg = GpuConfig::from_options(ctx.session_config().options());
        let gpu = Gpu::for_config(&cfg);
        match encoded {
            Encoded::Join { node, decisions } => {
                let join = wrapped_from_bytes(&node, inputs, ctx, self, converter)?;
                let gpu = match gpu {
                    Ok(gpu) => gpu,
                    Err(e) => return Ok(without_device(join, &e)),
                };
                let profile = Arc::new(profile::load(gpu.info(), &cfg.profile_dir));
                match GpuHashJoinExec::try_new(Arc::clone(&join), &cfg) {
                    Ok(exec) => Ok(Arc::new(exec.with_decisions(decisions, profile))),
                    Err(e) => Ok(not_rebuilt(join, crate::error::reason(&e))),
                }
            }
            Encoded::Aggregate { node, decisions, filters, priced } => {
                let input = single(inputs, "GpuAggregateExec")?;
                let agg = over_input(plan_from_bytes(&node, ctx, self, converter)?, &input)?;
                let gpu = match gpu {
                    Ok(gpu) => gpu,
                    Err(e) => return Ok(without_device(agg, &e)),
                };
                let profile = Arc::new(profile::load(gpu.info(), &cfg.profile_dir));
                let mut exec = match GpuAggregateExec::try_new(Arc::clone(&agg), &cfg) {
                    Ok(exec) => exec,
                    Err(e) => return Ok(not_rebuilt(agg, crate::error::reason(&e))),
                };
                if decisions.fused {
                    exec = exec.with_fused_input(filters);
                    if !reads(exec.fused_input(), &input) {
                        let why = "its fused filters and projections were not taken in again as sent";
                        return Ok(not_rebuilt(agg, why));
                    }
                }
                if priced {
                    exec = exec.with_priced_upload(&cfg, &gpu, &profile);
                }
                Ok(Arc::new(exec.with_decisions(decisions, profile)))
            }
            Encoded::FilterProject { node, filters, priced } => {
                let input = single(inputs, "GpuFilterProjectExec")?;
                let top = over_input(plan_from_bytes(&node, ctx, self, converter)?, &input)?;
                let gpu = match gpu {
                    Ok(gpu) => gpu,
                    Err(e) => return Ok(without_device(top, &e)),
                };
                let exec = match GpuFilterProjectExec::try_new(&top, filters) {
                    Ok(Some(exec)) if reads(Some(exec.fused()), &input) => exec,
                    Ok(_) => {
                        return Ok(not_rebuilt(top, "its filters and projections were not taken in again as sent"));
                    }
                    Err(e) => return Ok(not_rebuilt(top, crate::error::reason(&e))),
                };
                Ok(Arc::new(match priced {
                    true => exec.with_priced_upload(&cfg, &gpu, &profile::load(gpu.info(), &cfg.profile_dir)),
                    false => exec,
                }))
            }
            Encoded::StageClock => Ok(Arc::new(StageClockExec::new(single(inputs, "StageClockExec")?))),
            Encoded::Upload => match (gpu, inputs) {
                (Ok(_), [input]) => Ok(Arc::new(GpuUploadExec::new(Arc::clone(input)))),
                (Err(_), [input]) => Ok(Arc::clone(input)),
                _ => internal_err!("a GpuUploadExec was sent with {} inputs", inputs.len()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::joins::HashJoinExec;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::cost::Profile;
    use crate::rule::costing::join_estimate;

    /// Filters sent for the GPU that the receiving process cannot take in again come back as
    /// DataFusion's filter with the reason, not as an error that fails the stage.
    #[test]
    fn a_fusion_that_cannot_be_built_again_stays_on_the_cpu() {
        use datafusion::physical_expr::expressions::{col, like, lit};
        use datafusion::physical_plan::displayable;
        use datafusion::physical_plan::filter::FilterExec;
        use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;
        let _l = crate::testing::gpu_lock();
        if crate::testing::gpu_or_skip("a_fusion_that_cannot_be_built_again_stays_on_the_cpu").is_none() {
            return;
        }
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::clone(&schema)));
        // `_` in a LIKE pattern has no GPU kernel: the fusion is refused where it is rebuilt.
        let predicate = like(false, false, col("s", &schema).unwrap(), lit("a_b%"), &schema).unwrap();
        let top: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, Arc::clone(&input)).unwrap());
        let converter = DefaultPhysicalProtoConverter {};
        let node = plan_to_bytes(&top, &GpuPlanCodec, &converter).unwrap();
        let bytes = serde_json::to_vec(&Encoded::FilterProject { node, filters: true, priced: false }).unwrap();
        let ctx = SessionContext::new();
        let back = GpuPlanCodec.try_decode(&bytes, &[input], &ctx.task_ctx(), &converter).expect("decodes");
        let shown = displayable(back.as_ref()).one_line().to_string();
        assert!(shown.contains("CpuFallbackExec") && shown.contains("could not be built again"), "{shown}");
    }

    /// A join's decisions with the cost model's estimate survive their bytes: the join rebuilt
    /// from them under the same profile shows the same algorithm, reason and notes.
    #[tokio::test]
    async fn join_decisions_with_an_estimate_come_back_the_same() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false)]));
        let batch = |n: i32| {
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int32Array::from_iter_values(0..n))]).unwrap()
        };
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        for (name, rows) in [("a", 50_000), ("b", 400_000)] {
            let table = MemTable::try_new(Arc::clone(&schema), vec![vec![batch(rows)]]).unwrap();
            ctx.register_table(name, Arc::new(table)).unwrap();
        }
        let plan =
            ctx.sql("SELECT a.k FROM a JOIN b ON a.k = b.k").await.unwrap().create_physical_plan().await.unwrap();
        let mut join = None;
        plan.apply(|n| {
            if n.downcast_ref::<HashJoinExec>().is_some() {
                join = Some(Arc::clone(n));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let join = join.expect("a hash join");
        let cfg = GpuConfig { min_rows: 0, ..GpuConfig::default() };
        let profile = Arc::new(Profile::h100());
        let exec = GpuHashJoinExec::try_new(Arc::clone(&join), &cfg).unwrap();
        let estimate = join_estimate(&exec, &join, &cfg, &profile, None, None).expect("an estimate");
        let exec = exec.with_estimate(estimate).with_swap_note("a test's note".into()).for_gpu_parent();
        let bytes = serde_json::to_vec(&exec.decisions()).unwrap();
        let decisions: JoinDecisions = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(decisions, exec.decisions());
        let back = GpuHashJoinExec::try_new(Arc::clone(&join), &cfg).unwrap().with_decisions(decisions, profile);
        let show = |e: &GpuHashJoinExec| displayable(e as &dyn ExecutionPlan).one_line().to_string();
        assert_eq!(show(&back), show(&exec));
        assert!(back.placed_for_gpu_parent() && back.estimate().is_some());
    }
}
