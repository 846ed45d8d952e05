//! Workers: `datafusion-distributed`'s gRPC service with sessions that decode the GPU execs
//! ([`GpuPlanCodec`]) for this process's device, under the `gpu.` settings the coordinator sent
//! with the query.

use std::net::SocketAddr;

use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use http::HeaderMap;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use url::Url;

use super::codec::GpuPlanCodec;
use super::link::{Link, LinkedChannels};
use crate::config::GpuConfig;
use crate::session::with_gpu_options;

/// The header prefix under which `datafusion-distributed` sends a coordinator's config
/// extensions, each option as `<prefix><extension>.<key>`.
const CONFIG_HEADER: &str = "x-datafusion-distributed-config-";

/// `cfg` with the `gpu.` options a coordinator sent in `headers`. Our option entries carry
/// their full `gpu.` names, so each arrives as `gpu.gpu.<key>`; `datafusion-distributed`'s own
/// reader strips both prefixes and then finds no such key, so the worker reads them here.
pub fn gpu_options_from_headers(mut cfg: GpuConfig, headers: &HeaderMap) -> Result<GpuConfig> {
    use datafusion::config::ExtensionOptions;
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(CONFIG_HEADER).and_then(|k| k.strip_prefix("gpu.")) else {
            continue;
        };
        let key = key.strip_prefix("gpu.").unwrap_or(key);
        let value = value
            .to_str()
            .map_err(|e| DataFusionError::Configuration(format!("the coordinator's gpu.{key} is not text: {e}")))?;
        cfg.set(key, value)?;
    }
    Ok(cfg)
}

/// A worker's `gpu.` settings: the coordinator's `coordinator`, on `device` alone when the worker
/// was given one (whatever set the coordinator's `gpu.devices` lists).
fn on_device(coordinator: GpuConfig, device: Option<usize>) -> GpuConfig {
    match device {
        Some(d) => GpuConfig { device: d, devices: crate::config::DevicesSetting::One, ..coordinator },
        None => coordinator,
    }
}

/// A worker whose sessions decode GPU execs: the coordinator's `gpu.` settings, on device
/// `device` alone when given (else the coordinator's `gpu.device` and `gpu.devices`). With `link_gbps`, what it reads
/// from other workers comes through a [`Link`] of that many Gb/s (see `crate::distributed::link`).
pub fn gpu_worker(device: Option<usize>, link_gbps: Option<f64>) -> Result<Worker> {
    let channels = link_gbps.map(Link::gbit_per_second).transpose()?.map(LinkedChannels::new);
    Ok(Worker::from_session_builder(move |mut ctx: WorkerQueryContext| {
        let channels = channels.clone();
        async move {
            let mut config = with_gpu_options(ctx.builder.config().take().unwrap_or_else(SessionConfig::new));
            let gpu = gpu_options_from_headers(GpuConfig::from_options(config.options()), &ctx.headers)?;
            config.options_mut().extensions.insert(on_device(gpu, device));
            let builder = ctx.builder.with_config(config).with_distributed_user_codec(GpuPlanCodec);
            Ok(match channels {
                Some(channels) => builder.with_distributed_channel_resolver(channels).build(),
                None => builder.build(),
            })
        }
    }))
}

/// A worker serving on a TCP port of this process, until [`WorkerServer::stop`] (or until it is
/// dropped: the server is then told to shut down).
pub struct WorkerServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    /// The server's task, until [`WorkerServer::wait`] or [`WorkerServer::stop`] joins it.
    task: Option<JoinHandle<std::result::Result<(), tonic::transport::Error>>>,
}

impl WorkerServer {
    /// Starts [`gpu_worker`] on `addr` (port 0: any free port) on the current Tokio runtime.
    pub async fn start(addr: SocketAddr, device: Option<usize>, link_gbps: Option<f64>) -> Result<WorkerServer> {
        let service = gpu_worker(device, link_gbps)?.into_worker_server();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| DataFusionError::Execution(format!("a worker cannot listen on {addr}: {e}")))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(WorkerServer { addr, stop: Some(stop), task: Some(task) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URL, as a coordinator's worker list names it.
    pub fn url(&self) -> Result<Url> {
        Url::parse(&format!("http://{}", self.addr))
            .map_err(|e| DataFusionError::Internal(format!("a worker's address {} is no URL: {e}", self.addr)))
    }

    /// Serves until the process is stopped (the `worker` command), or the server fails.
    pub async fn wait(mut self) -> Result<()> {
        self.join().await
    }

    /// Stops serving and waits for the server to end.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join().await
    }

    /// Waits for the server's task to end.
    async fn join(&mut self) -> Result<()> {
        let Some(task) = self.task.take() else { return Ok(()) };
        match task.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(DataFusionError::Execution(format!("a worker's server failed: {e}"))),
            Err(e) => Err(DataFusionError::Execution(format!("a worker's server task ended abnormally: {e}"))),
        }
    }
}

impl Drop for WorkerServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Workers started in this process for a one-command try or a test, on ports of localhost.
pub struct LocalWorkers {
    servers: Vec<WorkerServer>,
}

impl LocalWorkers {
    /// Starts `n` workers (at least one) on free ports of 127.0.0.1, all on `device` when given,
    /// each reading the others' streams through a link of its own of `link_gbps` when given.
    pub async fn start(n: usize, device: Option<usize>, link_gbps: Option<f64>) -> Result<LocalWorkers> {
        if n == 0 {
            return Err(DataFusionError::Configuration("--local-workers needs at least one worker".into()));
        }
        let mut servers = Vec::with_capacity(n);
        for _ in 0..n {
            servers.push(WorkerServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), device, link_gbps).await?);
        }
        Ok(LocalWorkers { servers })
    }

    /// Their URLs.
    pub fn urls(&self) -> Result<Vec<Url>> {
        self.servers.iter().map(WorkerServer::url).collect()
    }

    /// A resolver naming them, for [`super::distributed_session_state`].
    pub fn resolver(&self) -> Result<WorkerUrls> {
        Ok(WorkerUrls(self.urls()?))
    }

    /// Stops each and waits for it.
    pub async fn stop(self) -> Result<()> {
        let mut first = Ok(());
        for s in self.servers {
            if let Err(e) = s.stop().await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}

/// A fixed list of worker URLs (`--workers URL,..`).
#[derive(Debug, Clone)]
pub struct WorkerUrls(pub Vec<Url>);

impl WorkerUrls {
    /// The URLs in `list` (comma-separated; `host:port` taken as `http://host:port`).
    pub fn parse(list: &str) -> Result<WorkerUrls> {
        let urls = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                let text = if s.contains("://") { s.to_string() } else { format!("http://{s}") };
                Url::parse(&text).map_err(|e| DataFusionError::Configuration(format!("worker address {s:?}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        if urls.is_empty() {
            return Err(DataFusionError::Configuration("--workers names no worker".into()));
        }
        Ok(WorkerUrls(urls))
    }
}

impl datafusion_distributed::WorkerResolver for WorkerUrls {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DevicesSetting;

    /// A worker given `--device 1` runs there alone under a coordinator's device list; without
    /// one it keeps the coordinator's settings.
    #[test]
    fn a_worker_given_a_device_runs_on_it_alone() {
        let coordinator = GpuConfig { devices: DevicesSetting::List(vec![0, 1]), ..GpuConfig::default() };
        let mine = on_device(coordinator.clone(), Some(1));
        assert_eq!((mine.home_device(), &mine.devices), (1, &DevicesSetting::One));
        let theirs = on_device(coordinator, None);
        assert_eq!(theirs.home_device(), 0);
        assert_eq!(theirs.devices, DevicesSetting::List(vec![0, 1]));
    }
}
