//! CUDA C++ kernels: the sources in `kernels/` are embedded into the binary, compiled once per
//! process by NVRTC for the device's own architecture (`sm_90` on H100/H200, as CUBIN, so the
//! driver does not JIT PTX), and cached on disk keyed by source hash, architecture, driver and
//! NVRTC versions. A compile error carries NVRTC's log.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use cudarc::nvrtc::sys::{self as nv, nvrtcResult};
use sha2::{Digest, Sha256};

use super::probe::DeviceInfo;
use crate::error::{CudaResultExt, Result, gpu_error};

/// Headers every kernel file may `#include "name"`.
pub const HEADERS: &[(&str, &str)] = &[("common.cuh", include_str!("../../kernels/common.cuh"))];

/// Kernel files by module name.
pub const MODULES: &[(&str, &str)] = &[
    ("copy", include_str!("../../kernels/copy.cu")),
    ("scan", include_str!("../../kernels/scan.cu")),
    ("radix", include_str!("../../kernels/radix.cu")),
    ("gather", include_str!("../../kernels/gather.cu")),
    ("keys", include_str!("../../kernels/keys.cu")),
    ("select", include_str!("../../kernels/select.cu")),
    ("materialize", include_str!("../../kernels/materialize.cu")),
    ("verify", include_str!("../../kernels/verify.cu")),
    ("join", include_str!("../../kernels/join.cu")),
    ("groupby", include_str!("../../kernels/groupby.cu")),
    ("spill", include_str!("../../kernels/spill.cu")),
];

/// NVRTC options besides the architecture.
const OPTIONS: &[&str] = &["-std=c++17", "--device-int128"];

/// Counters of how kernels were obtained in this process.
#[derive(Debug, Default)]
pub struct KernelStats {
    pub compiled: AtomicU64,
    pub disk_hits: AtomicU64,
}

/// Compiled modules of one context.
#[derive(Debug)]
pub struct KernelCache {
    ctx: Arc<CudaContext>,
    arch: String,
    versions: String,
    dir: Option<PathBuf>,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    /// Modules generated at run time (e.g. a join filter), by a digest of their source.
    generated: Mutex<HashMap<String, Arc<CudaModule>>>,
    pub stats: KernelStats,
}

/// The default cache folder: `$XDG_CACHE_HOME/datafusion-gpu/kernels` or its platform equivalent.
pub fn default_cache_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("datafusion-gpu").join("kernels"))
}

impl KernelCache {
    /// `dir = None` disables the disk cache.
    pub fn new(ctx: Arc<CudaContext>, info: &DeviceInfo, dir: Option<PathBuf>) -> Self {
        KernelCache {
            ctx,
            arch: info.arch(),
            versions: format!("driver {} nvrtc {}.{}", info.driver_version, info.nvrtc_version.0, info.nvrtc_version.1),
            dir,
            modules: Mutex::new(HashMap::new()),
            generated: Mutex::new(HashMap::new()),
            stats: KernelStats::default(),
        }
    }

    pub fn cache_dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Function `name` of module `module` (one of [`MODULES`]), compiling or loading it on first use.
    pub fn function(&self, module: &str, name: &str) -> Result<CudaFunction> {
        let m = self.module(module)?;
        m.load_function(name).gpu(format!("loading kernel {module}::{name}"))
    }

    pub fn module(&self, module: &str) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().map_err(|_| gpu_error("kernel cache lock poisoned"))?;
        if let Some(m) = modules.get(module) {
            return Ok(Arc::clone(m));
        }
        let (name, source) = MODULES
            .iter()
            .find(|(n, _)| *n == module)
            .ok_or_else(|| gpu_error(format!("no kernel module named '{module}'")))?;
        let cubin = self.cubin(name, source)?;
        let loaded = self.ctx.load_module(Ptx::from_binary(cubin)).gpu(format!("loading kernel module {name}"))?;
        modules.insert(name, Arc::clone(&loaded));
        Ok(loaded)
    }

    /// Function `kernel` of a module generated at run time from `source` (which may include the
    /// [`HEADERS`]); compiled once per process, and cached on disk like the built-in modules.
    /// `family` names the generator in the cache's file names (e.g. "filter").
    pub fn generated_function(&self, family: &str, source: &str, kernel: &str) -> Result<CudaFunction> {
        let digest = self.key(family, source);
        let mut generated = self.generated.lock().map_err(|_| gpu_error("kernel cache lock poisoned"))?;
        let module = match generated.get(&digest) {
            Some(m) => Arc::clone(m),
            None => {
                let cubin = self.cubin(&format!("{family}-{digest}"), source)?;
                let loaded = self
                    .ctx
                    .load_module(Ptx::from_binary(cubin))
                    .gpu(format!("loading generated kernel module {family}"))?;
                generated.insert(digest, Arc::clone(&loaded));
                loaded
            }
        };
        module.load_function(kernel).gpu(format!("loading generated kernel {family}::{kernel}"))
    }

    /// Cache key: everything that changes the compiled code.
    fn key(&self, name: &str, source: &str) -> String {
        let mut h = Sha256::new();
        for part in [env!("CARGO_PKG_VERSION"), name, source, &self.arch, &self.versions] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        for (hname, hsrc) in HEADERS {
            h.update(hname.as_bytes());
            h.update(hsrc.as_bytes());
        }
        for opt in OPTIONS {
            h.update(opt.as_bytes());
        }
        h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
    }

    fn cubin(&self, name: &str, source: &str) -> Result<Vec<u8>> {
        let path = self.dir.as_ref().map(|d| d.join(format!("{name}-{}-{}.cubin", self.arch, self.key(name, source))));
        if let Some(p) = &path
            && let Ok(bytes) = std::fs::read(p)
            && !bytes.is_empty()
        {
            self.stats.disk_hits.fetch_add(1, Ordering::SeqCst);
            return Ok(bytes);
        }
        let cubin = compile(name, source, &self.arch)?;
        self.stats.compiled.fetch_add(1, Ordering::SeqCst);
        if let Some(p) = &path
            && let Err(e) = write_atomically(p, &cubin)
        {
            log::warn!("could not write the kernel cache file {}: {e}", p.display());
        }
        Ok(cubin)
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn nvrtc_check(r: nvrtcResult, what: &str) -> Result<()> {
    if r == nvrtcResult::NVRTC_SUCCESS { Ok(()) } else { Err(gpu_error(format!("NVRTC {what} failed: {r:?}"))) }
}

/// Destroys the program when dropped.
struct Program(nv::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        unsafe {
            nv::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

/// Compiles one kernel file to CUBIN for `arch` (e.g. `sm_90`).
pub fn compile(name: &str, source: &str, arch: &str) -> Result<Vec<u8>> {
    let cstr = |s: &str| CString::new(s).map_err(|_| gpu_error(format!("kernel source {name} contains a NUL byte")));
    let src = cstr(source)?;
    let file = cstr(&format!("{name}.cu"))?;
    let header_src: Vec<CString> = HEADERS.iter().map(|(_, s)| cstr(s)).collect::<Result<_>>()?;
    let header_names: Vec<CString> = HEADERS.iter().map(|(n, _)| cstr(n)).collect::<Result<_>>()?;
    let hs: Vec<*const c_char> = header_src.iter().map(|c| c.as_ptr()).collect();
    let hn: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    nvrtc_check(
        unsafe {
            nv::nvrtcCreateProgram(&mut prog, src.as_ptr(), file.as_ptr(), hs.len() as i32, hs.as_ptr(), hn.as_ptr())
        },
        "create program",
    )?;
    let prog = Program(prog);
    let mut opts: Vec<CString> = vec![cstr(&format!("--gpu-architecture={arch}"))?];
    for o in OPTIONS {
        opts.push(cstr(o)?);
    }
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();
    let r = unsafe { nv::nvrtcCompileProgram(prog.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&prog).unwrap_or_else(|e| format!("(no log: {e})"));
        return Err(gpu_error(format!("NVRTC could not compile kernels/{name}.cu for {arch} ({r:?}):\n{log}")));
    }
    let mut size = 0usize;
    nvrtc_check(unsafe { nv::nvrtcGetCUBINSize(prog.0, &mut size) }, "get CUBIN size")?;
    let mut cubin = vec![0u8; size];
    nvrtc_check(unsafe { nv::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char) }, "get CUBIN")?;
    Ok(cubin)
}

fn program_log(prog: &Program) -> Result<String> {
    let mut size = 0usize;
    nvrtc_check(unsafe { nv::nvrtcGetProgramLogSize(prog.0, &mut size) }, "get log size")?;
    let mut log = vec![0u8; size.max(1)];
    nvrtc_check(unsafe { nv::nvrtcGetProgramLog(prog.0, log.as_mut_ptr() as *mut c_char) }, "get log")?;
    Ok(CStr::from_bytes_until_nul(&log).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::testing::{gpu_lock, gpu_or_skip};

    /// The first cache compiles with NVRTC and writes the CUBIN; a second cache on the same
    /// folder (as in a second process) loads it from disk without compiling.
    #[test]
    fn gpu_nvrtc_compile_then_disk_cache_hit() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_nvrtc_compile_then_disk_cache_hit") else { return };
        let dir = std::env::temp_dir().join(format!("dfg-kernel-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = KernelCache::new(Arc::clone(gpu.context()), gpu.info(), Some(dir.clone()));
        first.function("copy", "copy_u128").unwrap();
        first.function("copy", "fill_u32").unwrap();
        assert_eq!(first.stats.compiled.load(Ordering::SeqCst), 1, "one module, compiled once");
        assert_eq!(first.stats.disk_hits.load(Ordering::SeqCst), 0);
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(files.len(), 1, "one cached CUBIN");

        let second = KernelCache::new(Arc::clone(gpu.context()), gpu.info(), Some(dir.clone()));
        second.function("copy", "copy_u128").unwrap();
        assert_eq!(second.stats.compiled.load(Ordering::SeqCst), 0, "second run must not compile");
        assert_eq!(second.stats.disk_hits.load(Ordering::SeqCst), 1, "second run hits the disk cache");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A kernel that does not compile reports NVRTC's log.
    #[test]
    fn gpu_nvrtc_error_shows_the_log() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_nvrtc_error_shows_the_log") else { return };
        let err = compile("broken", "extern \"C\" __global__ void k() { undefined_name = 1; }", &gpu.info().arch())
            .unwrap_err()
            .to_string();
        assert!(err.contains("undefined_name"), "NVRTC log missing from: {err}");
    }
}
