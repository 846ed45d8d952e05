//! # datafusion-gpu
//!
//! An Apache DataFusion extension that runs joins and grouped aggregations on NVIDIA GPUs.
//! Add [`GpuOptimizerRule`] to a session (see [`SessionStateBuilderGpuExt::with_gpu`]); plans
//! keep DataFusion's semantics, and whatever the GPU path cannot do stays on the CPU with the
//! reason shown by EXPLAIN.
//!
//! Layers, bottom to top: `kernels/` (CUDA C++), [`device`] (runtime), [`columns`] (Arrow on the
//! device), [`exec`] (execution plans), [`rule`] (the optimizer rule), [`session`] (registration).

// GPU tests hold `testing::gpu_lock()` (a std mutex serialising them on the one device) for their
// whole body, awaits included; no other task of a test's runtime takes it.
#![cfg_attr(test, allow(clippy::await_holding_lock))]

pub mod aggregate;
pub mod columns;
pub mod config;
pub mod cost;
pub mod device;
pub mod distributed;
pub mod error;
pub mod exec;
pub mod expr;
pub mod join;
pub mod primitives;
pub mod rule;
pub mod session;
pub mod timeline;

/// Helpers of the GPU tests, shared with the benchmark crate's: random Arrow data, small plans,
/// the GPU gate (`DFG_REQUIRE_GPU`) and the lock that serialises tests on the one device.
#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod layers_tests;

pub use config::GpuConfig;
pub use exec::{GpuCachedTable, ResidentTable};
pub use rule::GpuOptimizerRule;
pub use session::{SessionStateBuilderGpuExt, gpu_session_context, with_gpu_options};
