//! Physical expressions on the GPU: a code generator from DataFusion's physical expressions to
//! CUDA C++ ([`codegen`]), used by join filters, and filters and projections evaluated on device
//! batches ([`project`]).

pub mod codegen;
pub mod project;

use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::DataType;

use crate::columns::DeviceColumn;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::Result;

/// The `cols` argument of a generated kernel ([`codegen::ColumnRead`]): per column its values
/// (or string offsets), its string bytes or 0, and its validity or 0, uploaded.
pub fn upload_column_addresses(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    cols: &[&DeviceColumn],
    what: &str,
) -> Result<DeviceBuffer> {
    let mut addresses: Vec<u64> = Vec::with_capacity(3 * cols.len());
    for col in cols {
        let string = matches!(
            col.data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Binary | DataType::LargeBinary
        );
        let buf = |i: usize| col.buffers.get(i).map_or(0, |b| b.raw_ptr(stream));
        addresses.push(buf(0));
        addresses.push(if string { buf(1) } else { 0 });
        addresses.push(col.validity.as_ref().map_or(0, |v| v.raw_ptr(stream)));
    }
    // At least one entry, so that a kernel reading no columns still gets a valid buffer.
    if addresses.is_empty() {
        addresses.push(0);
    }
    crate::primitives::upload_slice(gpu, stream, &addresses, what)
}

/// The `lits` argument of a generated kernel: its literals' values ([`codegen::Gen::literals`])
/// uploaded, or `None` (a null pointer) when it has none.
pub fn upload_literals(gpu: &Gpu, stream: &Arc<CudaStream>, literals: &[u64]) -> Result<Option<DeviceBuffer>> {
    if literals.is_empty() {
        return Ok(None);
    }
    crate::primitives::upload_slice(gpu, stream, literals, "kernel literals").map(Some)
}

/// What a generated kernel's error flag says: the worst severity of its rows
/// ([`codegen::Val::err`]); 0 when no row failed.
pub fn expression_outcome(flag: u32) -> Result<()> {
    use crate::error::{ExpressionFailure, expression_failure};
    match flag {
        0 => Ok(()),
        codegen::MAY_FAIL => Err(expression_failure(ExpressionFailure::MayFail)),
        _ => Err(expression_failure(ExpressionFailure::Fails)),
    }
}
