//! Distributed execution on `datafusion-distributed` (docs/design.md, "Distributed execution"):
//! the GPU execs' codec, sessions whose plans are cut into stages before the GPU rule places
//! their operators, and workers that build the GPU execs for their own device.

pub mod codec;
pub mod link;
pub mod session;
pub mod stage_clock;
pub mod worker;

pub use codec::GpuPlanCodec;
pub use link::{Link, LinkedChannels};
pub use session::{
    GpuStagePlanner, distributed_gpu_config, distributed_session, distributed_session_state, gpu_operators_in_stages,
    without_fallback_notes,
};
pub use stage_clock::{StageClockExec, with_stage_clocks};
pub use worker::{LocalWorkers, WorkerServer, WorkerUrls, gpu_worker};
