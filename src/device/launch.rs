//! Launching kernels whose arguments are device addresses (possibly null) and scalars, and small
//! device reads and fills: the plumbing the join and group-by algorithms are written with.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, sys};

use super::kernel::Kernel;
use super::{DeviceBuffer, Gpu, check_launch};
use crate::error::{CudaResultExt, Result, gpu_error};

/// One kernel argument: a 32- or 64-bit scalar; device addresses travel as `U64`.
#[derive(Debug, Clone, Copy)]
pub enum KArg {
    U32(u32),
    U64(u64),
}

impl KArg {
    /// Its size in bytes.
    pub fn size(&self) -> usize {
        match self {
            KArg::U32(_) => 4,
            KArg::U64(_) => 8,
        }
    }
}

/// The address of `buf` for a kernel on `stream` (see [`DeviceBuffer::raw_ptr`] for the stream
/// rule: issue the kernel on the stream that produced the buffer, or after synchronising it).
pub fn ptr(buf: &DeviceBuffer, stream: &CudaStream) -> KArg {
    KArg::U64(buf.raw_ptr(stream))
}

/// The address of `buf`, or null.
pub fn opt_ptr(buf: Option<&DeviceBuffer>, stream: &CudaStream) -> KArg {
    KArg::U64(buf.map_or(0, |b| b.raw_ptr(stream)))
}

/// Shared memory a block may use without opting in.
const DEFAULT_SMEM: u32 = 48 << 10;

impl Gpu {
    /// Launches `kernel` on `stream` and checks the launch; arguments whose number or widths
    /// differ from the kernel's parameters are refused.
    pub fn launch(&self, stream: &Arc<CudaStream>, kernel: Kernel, cfg: LaunchConfig, args: &[KArg]) -> Result<()> {
        let k = self.kernels().get(kernel)?;
        k.check_arguments(args)?;
        self.launch_function(stream, &k.function, kernel.name, cfg, args)
    }

    /// Launches a loaded function (e.g. a generated kernel) on `stream` and checks the launch.
    pub fn launch_function(
        &self,
        stream: &Arc<CudaStream>,
        f: &CudaFunction,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[KArg],
    ) -> Result<()> {
        if cfg.shared_mem_bytes > DEFAULT_SMEM {
            f.set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                cfg.shared_mem_bytes as i32,
            )
            .gpu(format!("raising the shared memory of kernel {kernel} to {} bytes", cfg.shared_mem_bytes))?;
        }
        let mut b = stream.launch_builder(f);
        for a in args {
            match a {
                KArg::U32(v) => b.arg(v),
                KArg::U64(v) => b.arg(v),
            };
        }
        // SAFETY: the callers pass the arguments in the order and widths of the kernel's
        // signature, documented beside each call (and checked against the driver's parameter
        // sizes for the kernels of `kernels/`); buffers are sized for the launch.
        check_launch(stream, unsafe { b.launch(cfg) }, kernel)
    }

    /// A grid-stride launch of `kernel` over `n` items.
    pub fn launch_n(&self, stream: &Arc<CudaStream>, kernel: Kernel, n: u64, args: &[KArg]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(stream, kernel, super::grid_for(n, 256, self.info().sm_count), args)
    }

    /// Allocates `len` bytes set to `byte`.
    pub fn alloc_filled(&self, stream: &Arc<CudaStream>, len: usize, byte: u8, what: &str) -> Result<DeviceBuffer> {
        let buf = self.alloc(stream, len, what)?;
        self.fill_bytes(stream, &buf, byte)?;
        Ok(buf)
    }

    /// Sets every byte of `buf` to `byte` (stream-ordered).
    pub fn fill_bytes(&self, stream: &Arc<CudaStream>, buf: &DeviceBuffer, byte: u8) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.context().bind_to_thread().gpu("binding the CUDA context")?;
        unsafe { sys::cuMemsetD8Async(buf.raw_ptr(stream), byte, buf.len(), stream.cu_stream()) }
            .result()
            .gpu("filling device memory")
    }

    /// Reads `count` values of `T` starting at value `first` of `buf`, waiting for `stream`.
    pub fn read<T: DeviceRepr + Default + Clone>(
        &self,
        stream: &Arc<CudaStream>,
        buf: &DeviceBuffer,
        first: usize,
        count: usize,
    ) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        if (first + count) * size > buf.len() {
            return Err(gpu_error(format!(
                "reading values {first}..{} of {size} bytes from a buffer of {} bytes",
                first + count,
                buf.len()
            )));
        }
        let mut out = vec![T::default(); count];
        if count == 0 {
            return Ok(out);
        }
        self.context().bind_to_thread().gpu("binding the CUDA context")?;
        let src = buf.raw_ptr(stream) + (first * size) as u64;
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(out.as_mut_ptr() as *mut std::ffi::c_void, src, count * size, stream.cu_stream())
        }
        .result()
        .gpu("reading device memory")?;
        stream.synchronize().gpu("waiting for a device read")?;
        Ok(out)
    }
}
