//! Registering the extension: the `gpu.` options and the optimizer rule, on a
//! `SessionStateBuilder` or a `SessionConfig`.

use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::config::GpuConfig;
use crate::rule::GpuOptimizerRule;

/// Adds the GPU extension to a session builder.
pub trait SessionStateBuilderGpuExt {
    /// Registers the `gpu.` options (defaults unless already set) and the GPU optimizer rule.
    fn with_gpu(self) -> Self;
}

impl SessionStateBuilderGpuExt for SessionStateBuilder {
    fn with_gpu(mut self) -> Self {
        let config = self.config().take().unwrap_or_default();
        *self.config() = Some(with_gpu_options(config));
        self.with_physical_optimizer_rule(Arc::new(GpuOptimizerRule::new()))
    }
}

/// `config` with the `gpu.` options registered (kept if already there).
pub fn with_gpu_options(mut config: SessionConfig) -> SessionConfig {
    if config.options().extensions.get::<GpuConfig>().is_none() {
        config.options_mut().extensions.insert(GpuConfig::default());
    }
    config
}

/// A `SessionContext` with DataFusion's defaults and the GPU extension.
pub fn gpu_session_context(config: SessionConfig) -> SessionContext {
    let state = SessionStateBuilder::new().with_config(config).with_default_features().with_gpu().build();
    SessionContext::new_with_state(state)
}

#[cfg(test)]
mod tests {
    /// The README's example (with `crate::` for `datafusion_gpu::`), plus assertions.
    #[tokio::test]
    async fn readme_example_registers_the_rule_and_options() {
        let _g = crate::testing::gpu_lock();
        use crate::SessionStateBuilderGpuExt;
        use datafusion::execution::SessionStateBuilder;
        use datafusion::prelude::SessionContext;

        let state = SessionStateBuilder::new().with_default_features().with_gpu().build();
        let ctx = SessionContext::new_with_state(state);
        ctx.sql("SET gpu.cost.min_rows = 1000").await.unwrap().collect().await.unwrap();

        let state = ctx.state();
        assert!(state.physical_optimizers().iter().any(|r| r.name() == "gpu"));
        let cfg = crate::GpuConfig::from_options(state.config_options());
        assert_eq!(cfg.min_rows, 1000);
    }
}
