//! A network link of a given rate between workers on one machine: the channels through which a
//! process reads other workers' streams receive at most that many bytes a second, together, as
//! the network card of a host in a cluster would. Local workers otherwise exchange their shuffles
//! over the loopback at memory speed, which hides what a real network costs (and what a join that
//! consumes its shuffle as it arrives saves).
//!
//! The limit is on what a process receives, the side that reads a stream: every connection it
//! opens to a worker (`datafusion-distributed`'s gRPC channels) reads through one shared
//! [`Link`], which lets bytes in no faster than its rate. TCP's and HTTP/2's flow control then
//! slow the sending side down, as a full link does.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::error::{DataFusionError, Result};
use datafusion_distributed::{ChannelResolver, WorkerChannel, grpc};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::Endpoint;
use url::Url;

/// The most bytes one read takes at once: the link's clock advances read by read, so that
/// connections sharing it take turns at this grain.
const READ_GRAIN: usize = 64 * 1024;

/// How far the link's clock may fall behind the wall clock and be caught up: a wait on the
/// runtime's timer ends up to a millisecond late (its resolution), more than a read's time at
/// 10 Gb/s (52 us for 64 KiB); the reads after it take that time back, at most this much.
const CATCH_UP: Duration = Duration::from_millis(5);

/// One process's receiving side of a network link of `bytes_per_second`: the moment from which it
/// is free again, advanced by each read's bytes over the rate.
#[derive(Debug)]
pub struct Link {
    bytes_per_second: f64,
    free_at: Mutex<Instant>,
}

impl Link {
    /// A link of `gbit_per_second` gigabits a second (10: a 10 Gb/s network card).
    pub fn gbit_per_second(gbit_per_second: f64) -> Result<Arc<Link>> {
        if !(gbit_per_second.is_finite() && gbit_per_second > 0.0) {
            return Err(DataFusionError::Configuration(format!(
                "a network link's rate must be a positive number of Gb/s, not {gbit_per_second}"
            )));
        }
        Ok(Arc::new(Link { bytes_per_second: gbit_per_second * 1e9 / 8.0, free_at: Mutex::new(Instant::now()) }))
    }

    /// Its rate in bytes a second.
    pub fn bytes_per_second(&self) -> f64 {
        self.bytes_per_second
    }

    /// Books `bytes` received now; returns when the link is free again (after them). Time the
    /// link spent idle is lost, except the last [`CATCH_UP`] of it (a late wake-up's).
    fn book(&self, bytes: usize) -> Instant {
        let now = Instant::now();
        let mut free_at = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*free_at).max(now.checked_sub(CATCH_UP).unwrap_or(now));
        *free_at = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_second);
        *free_at
    }
}

/// A TCP stream whose reads go through a [`Link`]: after a read of `n` bytes, the next waits until
/// the link has carried them at its rate.
struct LinkedStream {
    inner: TcpStream,
    link: Arc<Link>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl AsyncRead for LinkedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Some(wait) = self.wait.as_mut() {
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.wait = None;
        }
        let room = buf.remaining().min(READ_GRAIN);
        let mut part = buf.take(room);
        let read = Pin::new(&mut self.inner).poll_read(cx, &mut part);
        let n = part.filled().len();
        if let Poll::Ready(Ok(())) = read {
            // SAFETY: `part` is a view of `buf`'s unfilled bytes, and the read initialised
            // (filled) its first `n`.
            unsafe { buf.assume_init(n) };
            buf.advance(n);
            if n > 0 {
                let free_at = self.link.book(n);
                if free_at > Instant::now() {
                    self.wait = Some(Box::pin(tokio::time::sleep_until(free_at.into())));
                }
            }
        }
        read
    }
}

impl AsyncWrite for LinkedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A [`ChannelResolver`] whose gRPC channels (one per worker URL, made on first use and kept)
/// connect over TCP through a shared [`Link`].
#[derive(Clone)]
pub struct LinkedChannels {
    link: Arc<Link>,
    channels: Arc<Mutex<HashMap<Url, grpc::BoxCloneSyncChannel>>>,
}

impl LinkedChannels {
    pub fn new(link: Arc<Link>) -> LinkedChannels {
        LinkedChannels { link, channels: Arc::default() }
    }

    fn channel(&self, url: &Url) -> Result<grpc::BoxCloneSyncChannel> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(url) {
            return Ok(c.clone());
        }
        let host = url.host_str().map(str::to_string);
        let port = url.port_or_known_default();
        let (Some(host), Some(port)) = (host, port) else {
            return Err(DataFusionError::Configuration(format!("worker URL {url} names no host and port")));
        };
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| DataFusionError::Configuration(format!("worker URL {url}: {e}")))?;
        let link = Arc::clone(&self.link);
        let channel = endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
            let (host, link) = (host.clone(), Arc::clone(&link));
            async move {
                let inner = TcpStream::connect((host.as_str(), port)).await?;
                inner.set_nodelay(true)?;
                Ok::<_, io::Error>(TokioIo::new(LinkedStream { inner, link, wait: None }))
            }
        }));
        let channel = grpc::BoxCloneSyncChannel::new(channel);
        channels.insert(url.clone(), channel.clone());
        Ok(channel)
    }
}

#[async_trait]
impl ChannelResolver for LinkedChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        Ok(grpc::create_worker_client(self.channel(url)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_books_reads_back_to_back_at_its_rate() {
        let link = Link::gbit_per_second(8.0).unwrap(); // 1e9 bytes a second
        let start = Instant::now();
        let first = link.book(1_000_000);
        let second = link.book(1_000_000);
        // Two reads of 1 MB take 2 ms of the link, the second after the first.
        assert!(second.duration_since(first) >= Duration::from_micros(999), "{:?}", second - first);
        assert!(second.duration_since(start) >= Duration::from_micros(1999));
        assert!(Link::gbit_per_second(0.0).is_err());
        assert!(Link::gbit_per_second(f64::NAN).is_err());
    }

    #[tokio::test]
    async fn a_linked_stream_reads_no_faster_than_its_link() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bytes = 4 * 1024 * 1024;
        let sender = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(&vec![7u8; bytes]).await.unwrap();
        });
        // 0.32 Gb/s: 40 MB a second, so 4 MiB take about 105 ms.
        let link = Link::gbit_per_second(0.32).unwrap();
        let inner = TcpStream::connect(addr).await.unwrap();
        let mut stream = LinkedStream { inner, link, wait: None };
        let start = Instant::now();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        let took = start.elapsed();
        sender.await.unwrap();
        assert_eq!(got.len(), bytes);
        assert!(got.iter().all(|&b| b == 7));
        let floor = Duration::from_secs_f64(bytes as f64 / 40e6);
        // The last read's wait is not taken (nothing follows it), and the first reads may take
        // up the link's catch-up allowance.
        let grain = Duration::from_secs_f64(READ_GRAIN as f64 / 40e6);
        assert!(took + grain + CATCH_UP >= floor, "took {took:?}, the link needs {floor:?}");
        // Nor much slower than the link: the timer's late wake-ups are taken back.
        assert!(took < floor * 2, "took {took:?}, the link needs {floor:?}");
    }
}
