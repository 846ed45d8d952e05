//! Error helpers: every CUDA driver, NVRTC and budget failure becomes a `DataFusionError`
//! whose message says what was being done, so a user can act on it.

use cudarc::driver::DriverError;
use datafusion::error::DataFusionError;

/// Result type used throughout the crate.
pub type Result<T, E = DataFusionError> = std::result::Result<T, E>;

/// Wraps a CUDA driver error with the operation that failed.
pub fn cuda_err(what: impl std::fmt::Display, err: DriverError) -> DataFusionError {
    DataFusionError::Execution(format!("GPU: {what} failed: {err}"))
}

/// Extension to attach context to driver results: `ctx.synchronize().gpu("synchronize")?`.
pub trait CudaResultExt<T> {
    fn gpu(self, what: impl std::fmt::Display) -> Result<T>;
}

impl<T> CudaResultExt<T> for std::result::Result<T, DriverError> {
    fn gpu(self, what: impl std::fmt::Display) -> Result<T> {
        self.map_err(|e| cuda_err(what, e))
    }
}

/// What a `NotImplemented` error says (without DataFusion's prefix), or any other error's text:
/// the reason EXPLAIN gives where the GPU path leaves a node to DataFusion. The plan-time checks
/// (key types, expressions, aggregates, joins the GPU cannot take) return `NotImplemented`
/// errors (`not_impl_err!`).
pub fn reason(e: &DataFusionError) -> String {
    match e {
        DataFusionError::NotImplemented(m) => m.clone(),
        other => other.to_string(),
    }
}

/// An execution error with a `GPU:` prefix.
pub fn gpu_error(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(format!("GPU: {}", msg.into()))
}

/// The prefix of every error this crate raises.
pub const GPU_PREFIX: &str = "GPU: ";

/// Device memory that could not be had (over `gpu.memory.limit`, or refused by the driver): a
/// `ResourcesExhausted` error, which the execs answer by finishing the work on the CPU where
/// they can ([`recoverable_on_cpu`]).
pub fn device_memory_error(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::ResourcesExhausted(format!("{GPU_PREFIX}{}", msg.into()))
}

/// Whether DataFusion's own operator can do the work that failed with `e` on the GPU: device
/// memory ran out ([`device_memory_error`]), or combining dictionary batches on the way to the
/// device overflowed their key type (DataFusion's operators never combine them).
pub fn recoverable_on_cpu(e: &DataFusionError) -> bool {
    use datafusion::arrow::error::ArrowError;
    match e.find_root() {
        DataFusionError::ResourcesExhausted(m) => m.starts_with(GPU_PREFIX),
        DataFusionError::ArrowError(a, _) => matches!(a.as_ref(), ArrowError::DictionaryKeyOverflowError),
        _ => false,
    }
}

/// Whether `e` is an evaluation error of one of DataFusion's own operators (an overflow, a
/// division by zero, a failed cast): in a plan with GPU operators, those operators hand on batches
/// cut otherwise than DataFusion's plan would, and an `AND`, `OR` or `CASE` of DataFusion's
/// evaluates its failing part on the rows of a batch only where the batch's other rows need it. So
/// the error may be one DataFusion's plan never raises; `GpuQueryExec` runs the query again on that
/// plan, whose answer or error is DataFusion's own.
pub fn cpu_evaluation_error(e: &DataFusionError) -> bool {
    use datafusion::arrow::error::ArrowError;
    match e.find_root() {
        DataFusionError::ArrowError(a, _) => matches!(
            a.as_ref(),
            ArrowError::ArithmeticOverflow(_) | ArrowError::DivideByZero | ArrowError::CastError(_)
        ),
        _ => false,
    }
}

/// Rows on which a generated kernel's expression failed (128-bit decimal overflow, a cast past
/// the target precision), by what DataFusion does with the same rows. `GpuQueryExec` answers
/// either by running the query again on DataFusion's plan, so that the answer, or the error, is
/// DataFusion's own; where it cannot (the output already went out), the error stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpressionFailure {
    /// DataFusion evaluates the failing part on those rows and fails too (unless its plan stops
    /// before them, as at a LIMIT).
    Fails,
    /// DataFusion evaluates the failing part on those rows only in some batches (the right side
    /// of an `AND` or `OR` whose left side decides the row): whether it fails depends on how its
    /// batches fall.
    MayFail,
}

impl std::fmt::Display for ExpressionFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpressionFailure::Fails => write!(
                f,
                "{GPU_PREFIX}Arithmetic overflow: Overflow happened on a decimal operation or cast evaluated on the \
                 GPU, on a row DataFusion's plan evaluates too (unless it stops early, at a LIMIT)"
            ),
            ExpressionFailure::MayFail => write!(
                f,
                "{GPU_PREFIX}an expression evaluated on the GPU overflowed on a row where DataFusion evaluates it only \
                 in some batches (the right side of an AND or OR whose left side decides the row), and the query \
                 could not run again on DataFusion's plan; run it with SET gpu.enable = false for DataFusion's answer"
            ),
        }
    }
}

impl std::error::Error for ExpressionFailure {}

/// The error of a kernel's failed rows ([`ExpressionFailure`]).
pub fn expression_failure(kind: ExpressionFailure) -> DataFusionError {
    DataFusionError::External(Box::new(kind))
}

/// The [`ExpressionFailure`] `e` comes from, also when shared or given context.
pub fn expression_failure_of(e: &DataFusionError) -> Option<ExpressionFailure> {
    match e.find_root() {
        DataFusionError::External(x) => x.downcast_ref::<ExpressionFailure>().copied(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::error::ArrowError;

    use super::*;

    /// Device memory errors and dictionary key overflows are recoverable on the CPU, also
    /// when shared or given context; other errors, and the host pool's exhaustion, are not.
    #[test]
    fn recoverable_errors_are_device_memory_and_dictionary_overflow() {
        let mem = device_memory_error("a join needs 1GiB");
        assert!(mem.to_string().contains("GPU: a join needs 1GiB"), "{mem}");
        assert!(recoverable_on_cpu(&mem));
        assert!(recoverable_on_cpu(&DataFusionError::Shared(Arc::new(device_memory_error("x")))));
        assert!(recoverable_on_cpu(&device_memory_error("x").context("building")));
        let dict = DataFusionError::ArrowError(Box::new(ArrowError::DictionaryKeyOverflowError), None);
        assert!(recoverable_on_cpu(&dict));
        assert!(!recoverable_on_cpu(&DataFusionError::ResourcesExhausted("the host pool is full".into())));
        assert!(!recoverable_on_cpu(&gpu_error("a kernel failed")));
    }

    /// An expression failure is found under context and sharing, and is no memory error.
    #[test]
    fn expression_failures_are_typed() {
        let e = expression_failure(ExpressionFailure::MayFail);
        assert_eq!(expression_failure_of(&e), Some(ExpressionFailure::MayFail));
        let shared = DataFusionError::Shared(Arc::new(expression_failure(ExpressionFailure::Fails)));
        assert_eq!(expression_failure_of(&shared.context("probing")), Some(ExpressionFailure::Fails));
        assert!(!recoverable_on_cpu(&e));
        assert_eq!(expression_failure_of(&gpu_error("x")), None);
        assert!(e.to_string().contains("SET gpu.enable = false"), "{e}");
    }

    /// DataFusion's evaluation errors are told from the rest, under context.
    #[test]
    fn cpu_evaluation_errors_are_overflows_divisions_and_casts() {
        use datafusion::arrow::error::ArrowError;
        let arrow = |a: ArrowError| DataFusionError::ArrowError(Box::new(a), None);
        assert!(cpu_evaluation_error(&arrow(ArrowError::ArithmeticOverflow("1 * 2".into())).context("filter")));
        assert!(cpu_evaluation_error(&arrow(ArrowError::DivideByZero)));
        assert!(cpu_evaluation_error(&arrow(ArrowError::CastError("'x' to Int32".into()))));
        assert!(!cpu_evaluation_error(&arrow(ArrowError::InvalidArgumentError("schema".into()))));
        assert!(!cpu_evaluation_error(&gpu_error("x")));
        assert!(!cpu_evaluation_error(&device_memory_error("x")));
    }
}
