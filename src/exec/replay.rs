//! The host input of a GPU operator's partition, kept as it is read, so that DataFusion's own
//! operator can finish the partition over all of it when the GPU cannot (device memory ran out:
//! see [`crate::error::recoverable_on_cpu`]). The kept batches are reserved from DataFusion's
//! memory pool; when the pool refuses, nothing more is kept and the partition can no longer be
//! replayed (its GPU error then stands).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::{Stream, StreamExt};

use super::DeviceBatchStream;
use crate::columns::DeviceBatch;

struct Kept {
    /// The input, until [`Replay::take`] hands it on.
    input: Option<SendableRecordBatchStream>,
    /// Whether the input has ended (it is not polled again).
    ended: bool,
    batches: Vec<RecordBatch>,
    reservation: MemoryReservation,
    /// Every batch read so far is in `batches`.
    complete: bool,
    /// The input itself returned an error.
    input_failed: bool,
}

impl Kept {
    fn keep(&mut self, batch: &RecordBatch) {
        if !self.complete {
            return;
        }
        match self.reservation.try_grow(batch.get_array_memory_size()) {
            Ok(()) => self.batches.push(batch.clone()),
            Err(_) => {
                self.complete = false;
                self.batches.clear();
                self.reservation.free();
            }
        }
    }
}

/// The kept input of one partition (see the module's text).
pub struct Replay {
    kept: Arc<Mutex<Kept>>,
    schema: SchemaRef,
}

impl Replay {
    /// `input` as a stream that keeps every batch it reads, reserved from `pool` under `name`.
    pub fn new(
        input: SendableRecordBatchStream,
        pool: &Arc<dyn MemoryPool>,
        name: String,
    ) -> (Replay, SendableRecordBatchStream) {
        let schema = input.schema();
        let kept = Arc::new(Mutex::new(Kept {
            input: Some(input),
            ended: false,
            batches: Vec::new(),
            reservation: MemoryConsumer::new(name).register(pool),
            complete: true,
            input_failed: false,
        }));
        let tee = Tee { kept: Arc::clone(&kept), schema: Arc::clone(&schema) };
        (Replay { kept, schema }, Box::pin(tee))
    }

    /// Whether the input returned an error: the operator's failure was its input's, which a
    /// replay would meet again.
    pub fn input_failed(&self) -> bool {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).input_failed
    }

    /// Every batch read so far, then the rest of the input; `None` when a batch could not be
    /// kept. The stream that read the input must have been dropped: it reads nothing more.
    pub fn take(self) -> Option<SendableRecordBatchStream> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if !kept.complete {
            return None;
        }
        let batches = std::mem::take(&mut kept.batches);
        let rest = match (kept.input.take(), kept.ended) {
            (Some(input), false) => input,
            _ => Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&self.schema), futures::stream::empty())),
        };
        // The reservation goes with the batches' owner.
        let reservation = kept.reservation.take();
        let replayed = futures::stream::iter(batches.into_iter().map(Ok)).chain(rest).inspect(move |_| {
            let _ = &reservation;
        });
        Some(Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&self.schema), replayed)))
    }
}

/// The input read through [`Replay`].
struct Tee {
    kept: Arc<Mutex<Kept>>,
    schema: SchemaRef,
}

impl Stream for Tee {
    type Item = Result<RecordBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.ended {
            return Poll::Ready(None);
        }
        let Some(input) = kept.input.as_mut() else { return Poll::Ready(None) };
        let item = ready!(input.poll_next_unpin(cx));
        match &item {
            Some(Ok(batch)) => kept.keep(batch),
            Some(Err(_)) => {
                kept.complete = false;
                kept.input_failed = true;
            }
            None => kept.ended = true,
        }
        Poll::Ready(item)
    }
}

impl RecordBatchStream for Tee {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// The device input of a GPU operator's partition, kept (shared, not copied) until its first
/// chunk is done (`done` turns non-zero), so that DataFusion's operator can take the partition
/// over when the device runs out of memory before then: the kept batches and the rest of the
/// input go to it downloaded.
pub struct DeviceReplay {
    kept: Arc<Mutex<DeviceKept>>,
}

struct DeviceKept {
    input: Option<DeviceBatchStream>,
    ended: bool,
    batches: Vec<DeviceBatch>,
    /// Set once the operator's first chunk is done: nothing is kept from then on.
    done: Arc<AtomicUsize>,
    input_failed: bool,
}

impl DeviceReplay {
    pub fn new(input: DeviceBatchStream, done: Arc<AtomicUsize>) -> (DeviceReplay, DeviceBatchStream) {
        let kept = Arc::new(Mutex::new(DeviceKept {
            input: Some(input),
            ended: false,
            batches: Vec::new(),
            done,
            input_failed: false,
        }));
        let tee = futures::stream::poll_fn({
            let kept = Arc::clone(&kept);
            move |cx| {
                let mut k = kept.lock().unwrap_or_else(|e| e.into_inner());
                if k.ended {
                    return Poll::Ready(None);
                }
                let Some(input) = k.input.as_mut() else { return Poll::Ready(None) };
                let item = ready!(input.poll_next_unpin(cx));
                let keep = k.done.load(Ordering::SeqCst) == 0;
                match &item {
                    Some(Ok(b)) if keep => k.batches.push(b.clone()),
                    Some(Ok(_)) => k.batches.clear(),
                    Some(Err(_)) => k.input_failed = true,
                    None => k.ended = true,
                }
                Poll::Ready(item)
            }
        });
        (DeviceReplay { kept }, Box::pin(tee))
    }

    /// Whether the input itself returned an error.
    pub fn input_failed(&self) -> bool {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).input_failed
    }

    /// Every batch read so far, then the rest of the input, downloaded (rows of `schema`);
    /// `None` once the first chunk was done. The stream that read the input must have been
    /// dropped.
    pub fn take_on_host(self, schema: SchemaRef) -> Option<SendableRecordBatchStream> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.done.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let batches = std::mem::take(&mut kept.batches);
        let rest: DeviceBatchStream = match (kept.input.take(), kept.ended) {
            (Some(input), false) => input,
            _ => Box::pin(futures::stream::empty()),
        };
        let all: DeviceBatchStream = Box::pin(futures::stream::iter(batches.into_iter().map(Ok)).chain(rest));
        Some(super::download_stream(schema, all))
    }
}

/// A partition stream handed to DataFusion's operator by a GPU exec that gives it work: executed
/// once, it yields the stream handed over (by [`HandedStream::new`] or later by
/// [`HandedStream::hand`]).
pub struct HandedStream {
    schema: SchemaRef,
    stream: Mutex<Option<SendableRecordBatchStream>>,
}

impl HandedStream {
    pub fn new(schema: SchemaRef, stream: SendableRecordBatchStream) -> Self {
        HandedStream { schema, stream: Mutex::new(Some(stream)) }
    }

    /// A stream of `schema` to be handed over before it is executed.
    pub fn slot(schema: SchemaRef) -> Self {
        HandedStream { schema, stream: Mutex::new(None) }
    }

    pub fn hand(&self, stream: SendableRecordBatchStream) {
        *self.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream);
    }
}

impl std::fmt::Debug for HandedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandedStream").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl PartitionStream for HandedStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        match self.stream.lock().ok().and_then(|mut s| s.take()) {
            Some(s) => s,
            None => Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                futures::stream::once(async {
                    Err(DataFusionError::Internal(
                        "a GPU exec's input for the CPU was read twice, or never handed over".into(),
                    ))
                }),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, UnboundedMemoryPool};

    use super::*;

    fn input(n: i64) -> (SchemaRef, Vec<RecordBatch>, SendableRecordBatchStream) {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batches: Vec<RecordBatch> = (0..n)
            .map(|i| RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int64Array::from(vec![i; 100]))]).unwrap())
            .collect();
        let stream = futures::stream::iter(batches.clone().into_iter().map(Ok));
        (Arc::clone(&schema), batches, Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    /// A replay after part of the input was read gives every batch once, in order; after all
    /// of it, the same; a pool too small to keep a batch makes the partition unreplayable.
    #[tokio::test]
    async fn replay_gives_the_whole_input_once() {
        for read in [0usize, 3, 10] {
            let (_, batches, stream) = input(10);
            let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
            let (replay, mut tee) = Replay::new(stream, &pool, "test".into());
            for _ in 0..read {
                tee.next().await.expect("a batch").expect("no error");
            }
            assert!(pool.reserved() > 0 || read == 0);
            drop(tee);
            let got: Vec<RecordBatch> = replay.take().expect("replayable").map(|b| b.unwrap()).collect().await;
            assert_eq!(got, batches, "after {read} batches");
        }
        let (_, _, stream) = input(10);
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1000));
        let (replay, mut tee) = Replay::new(stream, &pool, "test".into());
        while tee.next().await.is_some() {}
        assert_eq!(pool.reserved(), 0, "what was kept is released");
        drop(tee);
        assert!(replay.take().is_none());
    }
}
