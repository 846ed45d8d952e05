//! Running plans with GPU operators on a distributed engine (`datafusion-distributed`, see
//! `docs/design.md`, "Distributed execution"). Its planner cuts the plan our rule has already
//! placed into stages, so the stage plans it sends to workers carry GPU execs: [`GpuPlanCodec`]
//! encodes them and decodes them on each worker against that worker's own device.

pub mod codec;

pub use codec::GpuPlanCodec;
