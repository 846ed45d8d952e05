//! A stream fed through a channel by a spawned task, as DataFusion's
//! `RecordBatchReceiverStream`: the task is aborted when the stream is dropped, and joined when
//! its channel closes, so that a task that panicked ends the stream with an error instead of
//! ending it as if every row had been sent.

use std::any::Any;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use futures::channel::mpsc;
use futures::{Future, Stream, StreamExt};

/// The items `task` sends into `rx`, then the task's own failure if it panicked.
pub struct TaskStream<T> {
    rx: mpsc::Receiver<Result<T>>,
    task: Option<SpawnedTask<()>>,
    what: &'static str,
}

impl<T> TaskStream<T> {
    /// The stream of `rx`, fed by `task`; `what` names the task in the error a panic becomes.
    pub fn new(rx: mpsc::Receiver<Result<T>>, task: SpawnedTask<()>, what: &'static str) -> Self {
        TaskStream { rx, task: Some(task), what }
    }
}

impl<T> Stream for TaskStream<T> {
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(item) = ready!(self.rx.poll_next_unpin(cx)) {
            return Poll::Ready(Some(item));
        }
        // The channel closed: every sender is gone, so the task returned or unwound. Join it.
        let what = self.what;
        let Some(task) = self.task.as_mut() else { return Poll::Ready(None) };
        let joined = ready!(Pin::new(task).poll(cx));
        self.task = None;
        Poll::Ready(match joined {
            Ok(()) => None,
            Err(e) if e.is_panic() => Some(Err(DataFusionError::Execution(format!(
                "{what} panicked: {}",
                panic_message(e.into_panic().as_ref())
            )))),
            Err(e) => Some(Err(DataFusionError::Execution(format!("{what} ended before its output: {e}")))),
        })
    }
}

/// The text of a panic's payload, where it has one.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use futures::SinkExt;

    use super::*;

    /// A task that sends some items and then panics ends its stream with an error that names
    /// it, after the items; a task that returns ends it cleanly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_task_ends_its_stream_with_an_error() {
        let (mut tx, rx) = mpsc::channel::<Result<i32>>(1);
        let task = SpawnedTask::spawn(async move {
            for i in 0..3 {
                tx.send(Ok(i)).await.expect("the stream reads");
            }
            panic!("lost rows");
        });
        let mut s = TaskStream::new(rx, task, "a test task");
        for i in 0..3 {
            assert_eq!(s.next().await.expect("an item").expect("not an error"), i);
        }
        let err = s.next().await.expect("an error, not the end").expect_err("an error");
        assert!(err.to_string().contains("a test task panicked: lost rows"), "{err}");
        assert!(s.next().await.is_none());

        let (mut tx, rx) = mpsc::channel::<Result<i32>>(1);
        let task = SpawnedTask::spawn(async move {
            tx.send(Ok(7)).await.expect("the stream reads");
        });
        let got: Vec<i32> = TaskStream::new(rx, task, "t").map(|r| r.expect("no error")).collect().await;
        assert_eq!(got, vec![7]);
    }
}
