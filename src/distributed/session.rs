//! Distributed sessions: a query planned by DataFusion, cut into stages by
//! `datafusion-distributed`'s planner, then its operators placed by the GPU rule, stage by stage.
//!
//! The rule runs after the cut (not as a physical optimizer rule before it) so that the
//! distributed planner sees DataFusion's own plan: it cuts stages at the hash repartitions the
//! rule would remove, broadcasts the build sides of the `HashJoinExec`s it recognises, and
//! reduces partially below its shuffles. The rule then sees each network boundary as a CPU
//! operator whose batches GPU operators above it upload, and reaches into the stages below it
//! (a boundary's children are its input stage's plan until the plan is sent). The stage plans
//! go to workers through [`GpuPlanCodec`], and each worker builds the GPU execs again for its
//! own device (`crate::distributed::worker`).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::DataFusionError;
use datafusion::error::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{LogicalPlan, PlanType, StringifiedPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{DistributedExt, SessionStateBuilderExt, WorkerResolver, display_plan_ascii};

use super::codec::GpuPlanCodec;
use crate::config::GpuConfig;
use crate::rule::GpuOptimizerRule;
use crate::session::with_gpu_options;

/// The query planner of a distributed session: `datafusion-distributed`'s (`inner`, which plans
/// with DataFusion and cuts the plan into stages), then the GPU rule over the whole staged
/// plan. `EXPLAIN` shows the stages, each with its operators as placed; the plan executed drops
/// the placement's notes ([`without_fallback_notes`]) and times each stage
/// ([`super::stage_clock::with_stage_clocks`]).
#[derive(Debug)]
pub struct GpuStagePlanner {
    inner: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for GpuStagePlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let LogicalPlan::Explain(e) = logical_plan {
            // DataFusion's planner explains a plan without distributing it: the staged plan
            // is shown instead, as `datafusion-distributed` draws it.
            let plan = self.placed(&e.plan, session).await?;
            let plans = vec![
                StringifiedPlan::new(PlanType::FinalLogicalPlan, e.plan.display_indent().to_string()),
                StringifiedPlan::new(PlanType::FinalPhysicalPlan, display_plan_ascii(plan.as_ref(), false)),
            ];
            return Ok(Arc::new(ExplainExec::new(Arc::clone(e.schema.inner()), plans, e.verbose)));
        }
        let placed = self.placed(logical_plan, session).await?;
        super::stage_clock::with_stage_clocks(without_fallback_notes(placed)?)
    }
}

impl GpuStagePlanner {
    /// `logical_plan` planned and cut into stages by `inner`, its operators placed by the rule.
    async fn placed(&self, logical_plan: &LogicalPlan, session: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self.inner.create_physical_plan(logical_plan, session).await?;
        GpuOptimizerRule::new().place_operators(plan, session.config_options())
    }
}

/// `plan` without its [`CpuFallbackExec`](crate::exec::CpuFallbackExec) nodes, which only carry
/// EXPLAIN's reasons. A stage's plan reaches its worker without them (DataFusion's serializer
/// sees through one to the CPU node it wraps), and `datafusion-distributed` matches each node of
/// the coordinator's stage plans with the worker's metrics of the node at the same place: the
/// plan executed keeps the same nodes as the workers' plans, or no metrics come back for a query
/// with an operator left on the CPU. `EXPLAIN` shows the notes (it plans without executing).
pub fn without_fallback_notes(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    plan.transform_up(|node| match crate::exec::fallback::fallback_input(&node) {
        Some(child) => Ok(Transformed::yes(child)),
        None => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// The `gpu.` settings a distributed plan needs, over the session's: the table cache off (a
/// worker reads its tables' files itself; cached scans are not sent) and the aggregates'
/// exchanges left to the shuffles between stages.
pub fn distributed_gpu_config(mut cfg: GpuConfig) -> GpuConfig {
    cfg.table_cache = false;
    cfg.table_cache_one_partition = false;
    cfg.aggregate_exchange = false;
    cfg
}

/// A session whose queries run through the workers `workers` names: DataFusion's defaults over
/// `config`; see [`distributed_session`].
pub fn distributed_session_state(
    config: SessionConfig,
    workers: impl WorkerResolver + 'static,
) -> Result<SessionState> {
    distributed_session(SessionStateBuilder::new().with_config(config).with_default_features(), workers)
}

/// The session of `builder` (its config, runtime and features; without the GPU rule among its
/// physical optimizer rules) running its queries through the workers `workers` names: the
/// `gpu.` options (with [`distributed_gpu_config`]; each is sent to the workers with every
/// query, so `SET gpu.…` reaches them), `datafusion-distributed`'s planner with the GPU rule
/// after it ([`GpuStagePlanner`]: it places the plan once it is cut), and [`GpuPlanCodec`] for
/// the stage plans.
pub fn distributed_session(
    mut builder: SessionStateBuilder,
    workers: impl WorkerResolver + 'static,
) -> Result<SessionState> {
    let mut config = with_gpu_options(builder.config().take().unwrap_or_default());
    let gpu = distributed_gpu_config(GpuConfig::from_options(config.options()));
    config.set_distributed_option_extension(gpu);
    let mut builder = builder
        .with_config(config)
        .with_distributed_worker_resolver(workers)
        .with_distributed_user_codec(GpuPlanCodec)
        .with_distributed_planner();
    let inner = builder.query_planner().take().ok_or_else(|| {
        DataFusionError::Internal("datafusion-distributed's planner was not set on the session".into())
    })?;
    Ok(builder.with_query_planner(Arc::new(GpuStagePlanner { inner })).build())
}

/// The GPU operators of `plan` inside the stages its network boundaries read (the workers'
/// stages, as the coordinator placed them), and the boundaries.
pub fn gpu_operators_in_stages(plan: &Arc<dyn ExecutionPlan>) -> (usize, usize) {
    use datafusion_distributed::NetworkBoundaryExt;
    fn walk(plan: &Arc<dyn ExecutionPlan>, in_stage: bool, counts: &mut (usize, usize)) {
        let boundary = plan.as_ref().is_network_boundary();
        if in_stage && crate::exec::as_gpu_exec(plan).is_some() {
            counts.0 += 1;
        }
        counts.1 += usize::from(boundary);
        for c in plan.children() {
            walk(c, in_stage || boundary, counts);
        }
    }
    let mut counts = (0, 0);
    walk(plan, false, &mut counts);
    counts
}
