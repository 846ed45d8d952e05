//! `CpuFallbackExec`: a transparent annotation around an operator the rule left on the CPU, so
//! that EXPLAIN says why. It executes its child unchanged, reports the child's properties and
//! statistics, and delegates downcasts to it (code looking for a `HashJoinExec` still finds it).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Statistics;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties};

use super::single_child;

/// Why an operator stays on the CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackReason {
    /// No usable GPU (driver, NVRTC, device or ordinal missing).
    NoDevice(String),
    /// Estimated input rows below `gpu.cost.min_rows`.
    BelowMinRows { rows: usize, min_rows: usize },
    /// A key or value of a type the GPU path does not handle.
    UnsupportedType { what: String, data_type: DataType },
    /// An expression the GPU path cannot evaluate.
    UnsupportedExpression { what: String, expr: String },
    /// A feature of the operator the GPU path does not handle, in words.
    Unsupported(String),
    /// The join's build side, by the plan's statistics, would not fit under `gpu.memory.limit`.
    OverMemoryLimit { build_bytes: u64, need_bytes: u64, limit: u64 },
    /// The cost model estimates the CPU faster (its estimates, in words).
    Cost(String),
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackReason::NoDevice(r) => write!(f, "no GPU ({r})"),
            FallbackReason::BelowMinRows { rows, min_rows } => {
                write!(f, "about {rows} input rows, below gpu.cost.min_rows = {min_rows}")
            }
            FallbackReason::UnsupportedType { what, data_type } => write!(f, "{what} has unsupported type {data_type}"),
            FallbackReason::UnsupportedExpression { what, expr } => write!(f, "{what} `{expr}` is not a plain column"),
            FallbackReason::Unsupported(what) => write!(f, "{what}"),
            FallbackReason::Cost(estimates) => {
                write!(
                    f,
                    "the cost model expects the CPU to be faster: {estimates} (SET gpu.placement = 'always' puts it on the GPU anyway)"
                )
            }
            FallbackReason::OverMemoryLimit { build_bytes, need_bytes, limit } => {
                let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
                write!(
                    f,
                    "the build side holds about {:.2} GiB (estimated); building on the GPU needs about {:.2} GiB, \
                     over gpu.memory.limit = {:.2} GiB (raise gpu.memory.limit, or use a GPU with more memory)",
                    gib(*build_bytes),
                    gib(*need_bytes),
                    gib(*limit)
                )
            }
        }
    }
}

#[derive(Debug)]
pub struct CpuFallbackExec {
    input: Arc<dyn ExecutionPlan>,
    reasons: Vec<FallbackReason>,
}

/// The name EXPLAIN prints, also used to find these nodes (downcasts see the child).
pub const CPU_FALLBACK_NAME: &str = "CpuFallbackExec";

/// The node `node` wraps, when it is a [`CpuFallbackExec`] (a note for EXPLAIN, nothing to run).
pub fn fallback_input(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    match node.name() == CPU_FALLBACK_NAME {
        true => node.children().first().map(|c| Arc::clone(c)),
        false => None,
    }
}

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
