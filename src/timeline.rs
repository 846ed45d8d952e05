//! A debug timeline of the GPU execs' work: with `RUST_LOG=datafusion_gpu::timeline=debug` each
//! exec partition logs when it starts, when its build and each chunk are ready, uploaded and
//! processed, and when it ends, in milliseconds since the process's first event. Reading it shows
//! which stages of a plan overlap and where the GPU waits for its CPU input (metrics only sum
//! times over partitions).

use std::sync::LazyLock;
use std::time::Instant;

pub const TARGET: &str = "datafusion_gpu::timeline";

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Whether timeline events are logged.
pub fn enabled() -> bool {
    log::log_enabled!(target: TARGET, log::Level::Debug)
}

/// Logs the event `what` (built only when the timeline is on) with the time since the epoch.
pub fn mark(who: &str, what: impl FnOnce() -> String) {
    if enabled() {
        let ms = EPOCH.elapsed().as_secs_f64() * 1e3;
        log::debug!(target: TARGET, "{ms:10.3} ms  {who}: {}", what());
    }
}
