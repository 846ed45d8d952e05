//! Physical expressions on the GPU: a code generator from DataFusion's physical expressions to
//! CUDA C++ ([`codegen`]), used by join filters, and filters and projections evaluated on device
//! batches ([`project`]).

pub mod codegen;
pub mod project;

use datafusion::error::DataFusionError;

/// The error arrow raises where a generated kernel flagged a failed row (128-bit decimal
/// overflow), as DataFusion's own evaluation would fail.
pub fn overflow_error() -> DataFusionError {
    DataFusionError::ArrowError(
        Box::new(datafusion::arrow::error::ArrowError::ArithmeticOverflow(
            "Overflow happened on a Decimal128 operation evaluated on the GPU".into(),
        )),
        None,
    )
}
