//! # datafusion-gpu-bench
//!
//! What measures and checks [`datafusion_gpu`] without being part of it: TPC-H and SSB data
//! generation and the suite runner that checks every answer against DataFusion's ([`tpch`]),
//! the operator micro-benchmarks and cost-model sweeps ([`bench`]), and the differential fuzzer
//! ([`fuzz`]). The `datafusion-gpu` CLI runs them as its `bench` and `fuzz` commands.

// GPU tests hold `testing::gpu_lock()` (a std mutex serialising them on the one device) for their
// whole body, awaits included; no other task of a test's runtime takes it.
#![cfg_attr(test, allow(clippy::await_holding_lock))]

pub mod bench;
pub mod fuzz;
pub mod tpch;
