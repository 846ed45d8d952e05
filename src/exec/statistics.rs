//! Plan statistics for sizing and pricing: one statistics walk shared by a run of the rule, and
//! the row counts the rule and the execs ask of it.

use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};

/// A statistics walk and the nodes it was asked about, held so that no node its cache knows by
/// address is freed (and its address reused by a new node) while the walk lives.
type SharedWalk = (StatisticsContext, Vec<Arc<dyn ExecutionPlan>>);

thread_local! {
    /// The statistics walk shared by one run of the rule ([`with_shared_statistics`]).
    static SHARED: std::cell::RefCell<Option<SharedWalk>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with one statistics walk for every estimate it asks for: each node's statistics are
/// computed once instead of once per question (an in-memory table sums its batches' sizes on
/// every call, and the rule asks about the inputs of every join and aggregate; the rule took
/// 5-17 ms of a TPC-H SF10 query's planning). Only while the plan's nodes do not change under
/// it: the cache knows nodes by address.
pub fn with_shared_statistics<R>(f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            SHARED.with(|s| s.borrow_mut().take());
        }
    }
    SHARED.with(|s| *s.borrow_mut() = Some((StatisticsContext::new(), Vec::new())));
    let _reset = Reset;
    f()
}

/// `plan`'s statistics: from the shared walk when one is running, else from a walk of its own.
pub fn statistics(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<datafusion::common::Statistics>> {
    let shared = SHARED.with(|s| {
        let mut s = s.try_borrow_mut().ok()?;
        let (ctx, held) = s.as_mut()?;
        held.push(Arc::clone(plan));
        Some(ctx.compute(plan.as_ref(), &StatisticsArgs::new()).ok())
    });
    match shared {
        Some(stats) => stats,
        None => StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new()).ok(),
    }
}

/// Estimated output rows of `plan`, when its statistics give one.
pub fn estimated_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    statistics(plan)?.num_rows.get_value().copied()
}

/// Output rows of `plan` when DataFusion knows them exactly (a scan of an in-memory table), not
/// an estimate.
pub fn exact_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    match statistics(plan)?.num_rows {
        datafusion::common::stats::Precision::Exact(n) => Some(n),
        _ => None,
    }
}
