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

/// An execution error with a `GPU:` prefix.
pub fn gpu_error(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(format!("GPU: {}", msg.into()))
}
