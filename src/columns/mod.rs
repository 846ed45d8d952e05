//! Arrow arrays and record batches on the device: host-side packing into the device layout
//! ([`host`]), device columns and batches with their transfers ([`device`]), and their
//! concatenation on the device ([`concat`]); tables copied into pinned host memory ([`pinned`]);
//! the device's cache of host columns uploaded for earlier queries ([`cache`]); tables' columns
//! laid out on the host ahead of their uploads, narrowed ([`image`]); cached columns packed into
//! the fewest bytes their values need ([`packed`]).
//! Pure data movement; no query semantics.

pub mod cache;
pub mod concat;
pub mod device;
pub mod host;
pub mod image;
pub mod packed;
pub mod pinned;

pub use device::{DeviceBatch, DeviceColumn, HostUpload, download_columns, upload_columns};
pub use host::{HostColumn, is_supported, is_supported_list, pack, unpack};
pub use pinned::{is_pinned, pin_partitions};

/// Bytes of a bitmap of `n` bits written in 32-bit words.
pub fn bitmap_bytes(n: u64) -> usize {
    (n.div_ceil(32) * 4) as usize
}

/// Bytes a row of `schema` takes, for sizing by row counts: fixed widths plus a validity byte,
/// 16 bytes for a variable-width value.
pub fn row_width(schema: &datafusion::arrow::datatypes::Schema) -> u64 {
    schema.fields().iter().map(|f| f.data_type().primitive_width().unwrap_or(16) as u64 + 1).sum()
}
