//! Benchmarks run by `datafusion-gpu bench ...`; results are recorded under `benches/results/`.

pub mod join;
pub mod primitives;
pub mod transfer;
