//! `CpuFallbackExec`: a transparent annotation around an operator the rule left on the CPU, so
//! that EXPLAIN says why. It executes its child unchanged, reports the child's properties and
//! statistics, and delegates downcasts to it (code looking for a `HashJoinExec` still finds it).

use std::fmt;
use std::sync::Arc;

use datafusion::common::Statistics;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties};

use super::single_child;
use crate::rule::FallbackReason;

#[derive(Debug)]
pub struct CpuFallbackExec {
    input: Arc<dyn ExecutionPlan>,
    reasons: Vec<FallbackReason>,
}

/// The name EXPLAIN prints, also used to find these nodes (downcasts see the child).
pub const CPU_FALLBACK_NAME: &str = "CpuFallbackExec";

impl CpuFallbackExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, reasons: Vec<FallbackReason>) -> Self {
        CpuFallbackExec { input, reasons }
    }

    pub fn reasons(&self) -> &[FallbackReason] {
        &self.reasons
    }

    fn reason_text(&self) -> String {
        self.reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; ")
    }
}

impl DisplayAs for CpuFallbackExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "on_cpu={}", self.reason_text()),
            _ => write!(f, "{CPU_FALLBACK_NAME}: {} stays on the CPU: {}", self.input.name(), self.reason_text()),
        }
    }
}

impl ExecutionPlan for CpuFallbackExec {
    fn name(&self) -> &str {
        CPU_FALLBACK_NAME
    }

    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.input.as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(CpuFallbackExec::new(single_child(children, CPU_FALLBACK_NAME)?, self.reasons.clone())))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats.first() {
            Some(s) => Ok(Arc::clone(s)),
            None => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
        }
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::Equal
    }
}
