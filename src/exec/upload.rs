//! `GpuUploadExec`: the boundary where a CPU child feeds GPU execs. Packs each host batch and
//! copies it to the device through the pinned staging buffers.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties};
use futures::{Stream, StreamExt};

use super::{DeviceBatchStream, GpuExec, blocking, download_all, download_stream, partition_gpu, single_child};
use crate::columns::{DeviceBatch, HostUpload};
use crate::config::GpuConfig;
use crate::device::Gpu;

#[derive(Debug)]
pub struct GpuUploadExec {
    input: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuUploadExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        GpuUploadExec { input, metrics: ExecutionPlanMetricsSet::new() }
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for GpuUploadExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => Ok(()),
            _ => write!(f, "GpuUploadExec"),
        }
    }
}

impl ExecutionPlan for GpuUploadExec {
    fn name(&self) -> &str {
        "GpuUploadExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuUploadExec::new(single_child(children, self.name())?)))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        Ok(download_stream(self.schema(), self.execute_device(partition, context)?))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

impl GpuExec for GpuUploadExec {
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = partition_gpu(&cfg, &context, partition)?;
        let input = self.input.execute(partition, context)?;
        let time = MetricBuilder::new(&self.metrics).subset_time("upload_time", partition);
        let bytes = MetricBuilder::new(&self.metrics).counter("bytes_uploaded", partition);
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        Ok(Box::pin(input.then(move |batch| {
            let (gpu, time, bytes, rows) = (gpu.clone(), time.clone(), bytes.clone(), rows.clone());
            async move {
                let batch = batch?;
                blocking(move || {
                    let _timer = time.timer();
                    // A stream per batch, round-robin: this batch's copies overlap the kernels
                    // that consumers run on the previous batch's stream.
                    let dev = DeviceBatch::upload(&gpu, &gpu.stream(), &batch)?;
                    bytes.add(dev.byte_size());
                    rows.add(dev.num_rows());
                    Ok(dev)
                })
                .await
            }
        })))
    }
}

/// Bytes the rows of a host batch hold (a slice counts only its own rows, where
/// `get_array_memory_size` counts the buffers it is cut from).
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    let data = batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or(c.get_array_memory_size()));
    data.map(|b| b as u64).sum::<u64>()
}

/// Host batches gathered into device chunks of about `chunk_rows` rows, uploaded as they
/// arrive in groups of about `group_bytes`: the copies overlap the CPU work that produces the
/// input (instead of all starting once the last batch is in), and each group's host memory is
/// freed once it is on the device. A chunk's groups are uploaded on one stream and
/// concatenated there; the chunk's consumers continue on that stream.
pub struct ChunkUploader {
    gpu: Arc<Gpu>,
    chunk_rows: usize,
    group_bytes: u64,
    time: Time,
    /// The part of `time` spent on the host preparing the groups (packing and assembling
    /// columns), before any copy.
    pack_time: Time,
    host: Vec<RecordBatch>,
    host_rows: usize,
    host_bytes: u64,
    device: Vec<DeviceBatch>,
    device_rows: usize,
    stream: Option<Arc<CudaStream>>,
}

impl ChunkUploader {
    /// Groups of at most this many bytes are copied at once (a quarter of a default staging slot
    /// pair: large enough that a copy's fixed costs do not matter, small enough to overlap).
    pub const GROUP_BYTES: u64 = 16 << 20;

    /// An uploader timing its uploads in `time`, and the host preparation within them (packing
    /// and assembling the columns) in `pack_time`.
    pub fn new(gpu: Arc<Gpu>, chunk_rows: usize, time: Time, pack_time: Time) -> Self {
        ChunkUploader {
            gpu,
            chunk_rows: chunk_rows.max(1),
            group_bytes: Self::GROUP_BYTES,
            time,
            pack_time,
            host: Vec::new(),
            host_rows: 0,
            host_bytes: 0,
            device: Vec::new(),
            device_rows: 0,
            stream: None,
        }
    }

    /// The device chunks of `input`'s batches, each handed on once complete (the last with
    /// whatever rows remain); the first error ends the stream.
    pub fn chunks<S>(self, input: S) -> impl Stream<Item = Result<DeviceBatch>> + Send + 'static
    where
        S: Stream<Item = Result<RecordBatch>> + Send + Unpin + 'static,
    {
        futures::stream::unfold(Some((input, self)), |state| async move {
            let (mut input, mut uploader) = state?;
            loop {
                let next = match input.next().await {
                    Some(Ok(b)) => uploader.push(b).await,
                    Some(Err(e)) => Err(e),
                    None => {
                        return match uploader.finish().await {
                            Ok(Some(last)) => Some((Ok(last), None)),
                            Ok(None) => None,
                            Err(e) => Some((Err(e), None)),
                        };
                    }
                };
                match next {
                    Ok(Some(chunk)) => return Some((Ok(chunk), Some((input, uploader)))),
                    Ok(None) => continue,
                    Err(e) => return Some((Err(e), None)),
                }
            }
        })
    }

    /// Takes `batch`; returns a chunk when this batch completed one.
    pub async fn push(&mut self, batch: RecordBatch) -> Result<Option<DeviceBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        self.host_rows += batch.num_rows();
        self.host_bytes += batch_bytes(&batch);
        self.host.push(batch);
        if self.host_bytes >= self.group_bytes || self.device_rows + self.host_rows >= self.chunk_rows {
            self.upload_group().await?;
        }
        if self.device_rows >= self.chunk_rows { self.take_chunk().await.map(Some) } else { Ok(None) }
    }

    /// The rows not yet handed out, as one last chunk (`None` when there are none).
    pub async fn finish(&mut self) -> Result<Option<DeviceBatch>> {
        self.upload_group().await?;
        if self.device.is_empty() { Ok(None) } else { self.take_chunk().await.map(Some) }
    }

    /// Uploads the waiting host batches: one batch as it is (its buffers may be a table's, worth
    /// page-locking when uploaded again), several assembled into one device batch as they are
    /// copied (see [`DeviceBatch::upload_concat`]).
    async fn upload_group(&mut self) -> Result<()> {
        if self.host.is_empty() {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.host);
        let (rows, bytes) = (self.host_rows, self.host_bytes);
        self.host_rows = 0;
        self.host_bytes = 0;
        let stream = Arc::clone(self.stream.get_or_insert_with(|| self.gpu.stream()));
        let (gpu, time, pack_time) = (Arc::clone(&self.gpu), self.time.clone(), self.pack_time.clone());
        // The batches come back only when the upload failed: the rows stay this uploader's
        // (see [`ChunkUploader::into_rows`]); otherwise their host memory is freed here.
        let (uploaded, batches) = blocking(move || {
            let _t = time.timer();
            let host = {
                let _p = pack_time.timer();
                match batches.as_slice() {
                    [one] => HostUpload::pack(one, true),
                    many => HostUpload::assemble(many),
                }
            };
            let uploaded = host.and_then(|host| DeviceBatch::upload_prepared(&gpu, &stream, host));
            let kept = if uploaded.is_err() { batches } else { Vec::new() };
            Ok((uploaded, kept))
        })
        .await?;
        match uploaded {
            Ok(dev) => {
                self.device_rows += dev.num_rows();
                self.device.push(dev);
                Ok(())
            }
            Err(e) => {
                (self.host, self.host_rows, self.host_bytes) = (batches, rows, bytes);
                Err(e)
            }
        }
    }

    /// The uploaded groups as one device batch, on their stream.
    async fn take_chunk(&mut self) -> Result<DeviceBatch> {
        let parts = std::mem::take(&mut self.device);
        let rows = std::mem::take(&mut self.device_rows);
        let stream = self.stream.take().unwrap_or_else(|| self.gpu.stream());
        let gpu = Arc::clone(&self.gpu);
        let (chunk, parts) = blocking(move || {
            let schema = match parts.first() {
                Some(p) => Arc::clone(p.schema()),
                None => return Err(DataFusionError::Internal("an upload chunk without rows".into())),
            };
            let chunk = DeviceBatch::concat(&gpu, &stream, schema, &parts);
            // The parts stay this uploader's when the concatenation failed.
            let kept = if chunk.is_err() { parts } else { Vec::new() };
            Ok((chunk, kept))
        })
        .await?;
        if chunk.is_err() {
            (self.device, self.device_rows) = (parts, rows);
        }
        chunk
    }

    /// Every row this uploader holds and has not handed out as a chunk, on the host in input
    /// order (uploaded groups downloaded): what an operator gives DataFusion's when its device
    /// work failed part way through a chunk.
    pub async fn into_rows(mut self) -> Result<Vec<RecordBatch>> {
        let parts = std::mem::take(&mut self.device);
        let mut rows = download_all(parts).await?;
        rows.append(&mut self.host);
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionConfig;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::exec::{as_gpu_exec, execute_device_input};
    use crate::session::gpu_session_context;
    use crate::testing::{assert_same_array, fresh_seed, gpu_lock, gpu_or_skip, random_array};
    use datafusion::arrow::compute::concat_batches;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::arrow::record_batch::RecordBatch;

    fn source(seed: u64, partitions: usize, rows: usize) -> (Arc<dyn ExecutionPlan>, Vec<Vec<RecordBatch>>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Decimal128(20, 4), true),
        ]));
        let parts: Vec<Vec<RecordBatch>> = (0..partitions)
            .map(|_| {
                (0..3)
                    .map(|_| {
                        let cols =
                            schema.fields().iter().map(|f| random_array(&mut rng, f.data_type(), rows, 0.2)).collect();
                        RecordBatch::try_new(Arc::clone(&schema), cols).unwrap()
                    })
                    .collect()
            })
            .collect();
        let plan = MemorySourceConfig::try_new_exec(&parts, schema, None).unwrap();
        (plan, parts)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_upload_exec_returns_its_input() {
        let _l = gpu_lock();
        let Some(_gpu) = gpu_or_skip("gpu_upload_exec_returns_its_input") else { return };
        let (plan, parts) = source(fresh_seed("gpu_upload_exec_returns_its_input"), 3, 10_000);
        let upload: Arc<dyn ExecutionPlan> = Arc::new(GpuUploadExec::new(plan));
        assert!(as_gpu_exec(&upload).is_some());
        let ctx = gpu_session_context(SessionConfig::new());
        // Per partition, in order (the source may re-chunk batches at batch_size).
        let mut total = 0;
        for (p, want) in parts.iter().enumerate() {
            let stream = upload.execute(p, ctx.task_ctx()).unwrap();
            let got = datafusion::physical_plan::common::collect(stream).await.unwrap();
            let got = concat_batches(&upload.schema(), &got).unwrap();
            let want = concat_batches(&upload.schema(), want).unwrap();
            assert_eq!(got.num_rows(), want.num_rows());
            for (a, b) in want.columns().iter().zip(got.columns()) {
                assert_same_array(a.as_ref(), b.as_ref(), &format!("partition {p}: uploaded then downloaded column"));
            }
            total += got.num_rows();
        }
        let metrics = upload.metrics().unwrap();
        assert_eq!(metrics.output_rows(), Some(total));
        assert!(metrics.sum_by_name("bytes_uploaded").is_some_and(|b| b.as_usize() > 0));
    }

    /// A GPU parent gets device batches from a GPU child without a host round trip, and from a
    /// CPU child through an implicit upload.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_device_input_from_gpu_and_cpu_children() {
        let _l = gpu_lock();
        let Some(_gpu) = gpu_or_skip("gpu_device_input_from_gpu_and_cpu_children") else { return };
        let (plan, parts) = source(fresh_seed("gpu_device_input"), 1, 5000);
        let ctx = gpu_session_context(SessionConfig::new());
        for child in [Arc::clone(&plan), Arc::new(GpuUploadExec::new(Arc::clone(&plan))) as Arc<dyn ExecutionPlan>] {
            let mut s = execute_device_input(&child, 0, ctx.task_ctx()).unwrap();
            let mut i = 0;
            while let Some(b) = futures::StreamExt::next(&mut s).await {
                let b = b.unwrap();
                assert_eq!(b.num_rows(), parts[0][i].num_rows());
                assert_eq!(&b.download().unwrap(), &parts[0][i]);
                i += 1;
            }
            assert_eq!(i, parts[0].len());
        }
    }

    /// Over a device set, partition p's batches go up to the set's device p mod n, and `onto`
    /// brings a batch made on another device to the consumer's, rows unchanged.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_partitions_upload_to_the_sets_devices_in_turn() {
        let _l = gpu_lock();
        let Some(_gpu) = gpu_or_skip("gpu_partitions_upload_to_the_sets_devices_in_turn") else { return };
        let (plan, parts) = source(fresh_seed("gpu_partitions_upload_to_the_sets_devices_in_turn"), 3, 4000);
        let cfg = crate::config::GpuConfig {
            devices: "0,0".parse().unwrap(),
            devices_spread_partitions: true,
            ..Default::default()
        };
        let ctx = gpu_session_context(SessionConfig::new().with_option_extension(cfg.clone()));
        let upload = GpuUploadExec::new(plan);
        let home = Gpu::for_session(&cfg, &ctx.session_id()).unwrap();
        for (p, want) in parts.iter().enumerate() {
            let on = ["0", "0:1"][p % 2];
            let s = upload.execute_device(p, ctx.task_ctx()).unwrap();
            let mut moved = crate::exec::onto(s, &home);
            let mut i = 0;
            while let Some(b) = futures::StreamExt::next(&mut moved).await {
                let b = b.unwrap();
                assert_eq!(b.gpu().label(), "0", "partition {p}: moved home from {on}");
                assert_eq!(&b.download().unwrap(), &want[i]);
                i += 1;
            }
            assert_eq!(i, want.len());
            let mut s = upload.execute_device(p, ctx.task_ctx()).unwrap();
            let first = futures::StreamExt::next(&mut s).await.unwrap().unwrap();
            assert_eq!(first.gpu().label(), on, "partition {p}");
        }
    }

    /// A request over gpu.memory.limit fails with the option's name in the message.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_request_over_memory_limit_is_a_clear_error() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_request_over_memory_limit_is_a_clear_error") else { return };
        let (plan, _) = source(1, 1, 50_000);
        let ctx = gpu_session_context(SessionConfig::new());
        ctx.sql("SET gpu.memory.limit = '64K'").await.unwrap().collect().await.unwrap();
        let err = collect(Arc::new(GpuUploadExec::new(plan)), ctx.task_ctx()).await.unwrap_err().to_string();
        // Restore the default for the other tests before asserting.
        gpu.memory().set_limit(None);
        assert!(err.contains("gpu.memory.limit is 64KiB"), "{err}");
        assert_eq!(gpu.memory().used(), 0, "failed uploads must release their reservations");
    }

    /// A chunk whose upload fails part way (device memory refused) leaves its rows with the
    /// uploader: the groups already on the device and the group that failed, which `into_rows`
    /// gives back on the host in input order, for DataFusion's operator to take over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_a_failed_upload_keeps_the_chunks_rows() {
        let _l = gpu_lock();
        let Some(_gpu) = gpu_or_skip("gpu_a_failed_upload_keeps_the_chunks_rows") else { return };
        let seed = fresh_seed("gpu_a_failed_upload_keeps_the_chunks_rows");
        let (_, parts) = source(seed, 1, 2000);
        let batches = &parts[0];
        let cfg = crate::config::GpuConfig::default();
        let gpu = Gpu::for_session(&cfg, &format!("upload-fault-{seed}")).unwrap();
        let time = Time::new();
        let mut uploader = ChunkUploader::new(Arc::clone(&gpu), usize::MAX, time.clone(), time);
        // Every batch is a group of its own; the ninth column buffer (in the second batch) is refused.
        uploader.group_bytes = 1;
        gpu.memory().fail_after(Some(("column", 8)));
        let (mut pushed, mut failed) = (Vec::new(), None);
        for b in batches {
            pushed.push(b.clone());
            if let Err(e) = uploader.push(b.clone()).await {
                failed = Some(e);
                break;
            }
        }
        gpu.memory().fail_after(None);
        let failed = failed.expect("an upload refused by fault injection");
        assert!(crate::error::recoverable_on_cpu(&failed), "{failed}");
        assert!(pushed.len() > 1 && pushed.len() <= batches.len(), "seed {seed}: failed at batch {}", pushed.len());
        let schema = batches[0].schema();
        let got = concat_batches(&schema, &uploader.into_rows().await.unwrap()).unwrap();
        let want = concat_batches(&schema, &pushed).unwrap();
        assert_eq!(got.num_rows(), want.num_rows(), "seed {seed}");
        for (g, w) in got.columns().iter().zip(want.columns()) {
            assert_same_array(w.as_ref(), g.as_ref(), &format!("seed {seed}"));
        }
    }
}
