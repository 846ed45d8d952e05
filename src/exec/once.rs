//! Work shared by the partitions of one exec and done once, as DataFusion's `OnceAsync` does for
//! a `CollectLeft` hash join's build: the first partition starts it, every partition awaits the
//! same outcome, and a failure is shared, not retried. Retrying would execute the work's input
//! partitions a second time (a `RepartitionExec` panics on that), and a partition cancelled
//! while the work runs leaves it to the others to drive rather than to start again.

use std::sync::{Arc, Mutex};

use datafusion::error::{DataFusionError, Result};
use futures::future::{BoxFuture, Shared};
use futures::{Future, FutureExt};

type SharedWork<T> = Shared<BoxFuture<'static, std::result::Result<T, Arc<DataFusionError>>>>;

/// The outcome of one piece of work, started by the first caller and shared by every caller.
pub struct OnceShared<T: Clone + Send + Sync + 'static> {
    work: Mutex<Option<SharedWork<T>>>,
}

impl<T: Clone + Send + Sync + 'static> Default for OnceShared<T> {
    fn default() -> Self {
        OnceShared { work: Mutex::new(None) }
    }
}

impl<T: Clone + Send + Sync + 'static> std::fmt::Debug for OnceShared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let started = self.work.lock().map(|w| w.is_some()).unwrap_or(false);
        f.debug_struct("OnceShared").field("started", &started).finish()
    }
}

impl<T: Clone + Send + Sync + 'static> OnceShared<T> {
    /// The work's outcome: `start()` runs for the first caller only; later callers (and callers
    /// after a failure) get the same value or error. The work must own what it uses: it may be
    /// driven to its end by a caller other than the one that started it.
    pub async fn get_or_start<F, Fut>(&self, start: F) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let work = {
            let mut slot = self.work.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert_with(|| start().map(|r| r.map_err(Arc::new)).boxed().shared()).clone()
        };
        work.await.map_err(DataFusionError::Shared)
    }

    /// Forgets the work and its outcome (the last user is done: what it holds can be freed).
    /// Callers still awaiting it keep their own handle to it.
    pub fn clear(&self) {
        self.work.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A failed start is not retried: every caller gets its error, and the work ran once. A
    /// caller cancelled while the work runs leaves it to the next caller, which finishes it
    /// rather than starting it again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_runs_once_and_shares_its_error() {
        let once = OnceShared::<u32>::default();
        let starts = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let s = Arc::clone(&starts);
            let err = once
                .get_or_start(|| async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    Err(DataFusionError::Execution("build failed".into()))
                })
                .await
                .expect_err("the shared error");
            assert!(err.to_string().contains("build failed"), "{err}");
        }
        assert_eq!(starts.load(Ordering::SeqCst), 1);

        let once = Arc::new(OnceShared::<u32>::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let starts = Arc::new(AtomicUsize::new(0));
        let s = Arc::clone(&starts);
        let first = {
            let once = Arc::clone(&once);
            tokio::spawn(async move {
                once.get_or_start(|| async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    rx.await.map_err(|e| DataFusionError::Execution(e.to_string()))?;
                    Ok(42)
                })
                .await
            })
        };
        while starts.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        first.abort();
        let _ = first.await;
        tx.send(()).expect("the work waits");
        let s = Arc::clone(&starts);
        let v = once.get_or_start(|| async move { Ok(s.fetch_add(100, Ordering::SeqCst) as u32) }).await;
        assert_eq!(v.expect("the first start's value"), 42);
        assert_eq!(starts.load(Ordering::SeqCst), 1);
    }
}
