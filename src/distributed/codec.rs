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
//! - a [`GpuUploadExec`]: nothing but itself; without a device its input as it is.
//!
//! A [`CpuFallbackExec`] never reaches the codec: DataFusion sees through it (its downcasts reach
//! the CPU node it wraps), so the CPU node is sent, without the reasons. Other GPU execs are not
//! carried yet: encoding one fails with its name.

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

use crate::config::GpuConfig;
use crate::cost::profile;
use crate::device::Gpu;
use crate::exec::fallback::FallbackReason;
use crate::exec::join::JoinDecisions;
use crate::exec::upload::GpuUploadExec;
use crate::exec::{CpuFallbackExec, GpuHashJoinExec};

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
    /// An upload to the device.
    Upload,
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
    let placeholders: Vec<Arc<dyn ExecutionPlan>> =
        node.children().iter().map(|c| Arc::new(EmptyExec::new(c.schema())) as Arc<dyn ExecutionPlan>).collect();
    let bare = Arc::clone(node).replace_children(placeholders, recompute())?;
    Ok(converter.execution_plan_to_proto(&bare, codec)?.encode_to_vec())
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
    let proto = PhysicalPlanNode::decode(bytes)
        .map_err(|e| DataFusionError::Internal(format!("a GPU exec's node does not decode: {e}")))?;
    let bare = converter.proto_to_execution_plan(&proto, &PhysicalPlanDecodeContext::new(ctx, codec))?;
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
        } else if any.is::<GpuUploadExec>() {
            Encoded::Upload
        } else {
            return not_impl_err!(
                "{} cannot be sent to another process yet (the GPU codec carries GpuHashJoinExec and GpuUploadExec)",
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
                    Err(e) => {
                        let why = FallbackReason::NoDevice(e.to_string());
                        return Ok(Arc::new(CpuFallbackExec::new(join, vec![why])));
                    }
                };
                let profile = Arc::new(profile::load(gpu.info(), &cfg.profile_dir));
                let exec = GpuHashJoinExec::try_new(join, &cfg)?;
                Ok(Arc::new(exec.with_decisions(decisions, profile)))
            }
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
