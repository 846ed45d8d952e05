//! Arrow arrays and record batches on the device: host-side packing into the device layout
//! ([`host`]), device columns and batches with their transfers ([`device`]), and their
//! concatenation on the device ([`concat`]); tables copied into pinned host memory ([`pinned`]).
//! Pure data movement; no query semantics.

pub mod concat;
pub mod device;
pub mod host;
pub mod pinned;

pub use device::{DeviceBatch, DeviceColumn, HostUpload, download_columns, upload_columns};
pub use host::{HostColumn, is_supported, is_supported_list, pack, unpack};
pub use pinned::{is_pinned, pin_partitions};
