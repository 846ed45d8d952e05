//! CUDA C++ kernels: the sources in `kernels/` are embedded into the binary, compiled once per
//! process by NVRTC for the device's own architecture (`sm_90` on H100/H200, as CUBIN, so the
//! driver does not JIT PTX), and cached on disk keyed by source hash, architecture, driver and
//! NVRTC versions. A compile error carries NVRTC's log. Which kernels there are is
//! [`super::kernel`]'s; each is loaded once per cache, with its parameter sizes.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, sys};
use cudarc::nvrtc::Ptx;
use cudarc::nvrtc::sys::{self as nv, nvrtcResult};
use sha2::{Digest, Sha256};

use super::probe::DeviceInfo;
use crate::error::{CudaResultExt, Result, gpu_error};

use super::kernel::{HEADERS, Kernel, Module};
use super::launch::KArg;

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
    /// The driver's version (e.g. 13000), as probed.
    driver_version: i32,
    versions: String,
    dir: Option<PathBuf>,
    modules: Mutex<HashMap<Module, Arc<CudaModule>>>,
    /// Kernels loaded from `modules`, with their parameter sizes.
    loaded: Mutex<HashMap<Kernel, Arc<LoadedKernel>>>,
    /// Modules generated at run time (e.g. a join filter), by a digest of their source, with
    /// when each was last used: at most [`GENERATED_MODULES`], the least recently used going
    /// first (a function handed out keeps its module loaded).
    generated: Mutex<(HashMap<String, (Arc<CudaModule>, u64)>, u64)>,
    pub stats: KernelStats,
}

/// A kernel loaded from its module.
#[derive(Debug)]
pub struct LoadedKernel {
    pub kernel: Kernel,
    pub function: CudaFunction,
    /// The size in bytes of each parameter, in order; `None` where the driver cannot say
    /// (`cuFuncGetParamInfo` came with CUDA 12.4).
    pub params: Option<Vec<usize>>,
}

impl LoadedKernel {
    /// Refuses arguments of other sizes than the kernel's parameters, in order (no allocation
    /// unless they differ: this runs at every launch).
    pub fn check_arguments(&self, args: &[KArg]) -> Result<()> {
        let Some(params) = &self.params else { return Ok(()) };
        if params.len() != args.len() || params.iter().zip(args).any(|(&p, a)| p != a.size()) {
            let given: Vec<usize> = args.iter().map(KArg::size).collect();
            return Err(gpu_error(format!(
                "kernel {} takes parameters of {params:?} bytes, but the launch passes {given:?}: a bug in the \
                 caller, please report it",
                self.kernel
            )));
        }
        Ok(())
    }
}

/// The sizes of `function`'s parameters, read from the driver (CUDA 12.4 and later; the
/// driver's version is `driver_version`).
fn parameter_sizes(function: &CudaFunction, kernel: Kernel, driver_version: i32) -> Result<Option<Vec<usize>>> {
    if driver_version < 12040 {
        return Ok(None);
    }
    let mut sizes = Vec::new();
    loop {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: the function is loaded and its module kept alive by `function`; the outputs
        // are two usize values.
        let r = unsafe { sys::cuFuncGetParamInfo(function.cu_function(), sizes.len(), &mut offset, &mut size) };
        match r {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            // Past the last parameter.
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(Some(sizes)),
            other => return Err(gpu_error(format!("reading the parameters of kernel {kernel}: {other:?}"))),
        }
        if sizes.len() > 64 {
            return Err(gpu_error(format!("kernel {kernel} reports more than 64 parameters")));
        }
    }
}

/// Most generated modules kept loaded at once.
pub const GENERATED_MODULES: usize = 256;

/// Environment variable that sets the kernel cache folder (`off` disables the disk cache).
pub const CACHE_DIR_ENV: &str = "DATAFUSION_GPU_KERNEL_CACHE";

/// The cache folder: [`CACHE_DIR_ENV`] when set, else `$XDG_CACHE_HOME/datafusion-gpu/kernels`
/// or its platform equivalent. It is the process's, never a session setting: the cache holds
/// code the device runs, and SQL must not choose where that code is read from.
pub fn default_cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => dirs::cache_dir().map(|d| d.join("datafusion-gpu").join("kernels")),
    }
}

/// The first bytes of every cache file, before the SHA-256 of the key and of the CUBIN.
const MAGIC: &[u8; 8] = b"DFGCUBN1";

/// A cache file's content: [`MAGIC`], the SHA-256 of `key`, the SHA-256 of `cubin`, `cubin`.
fn sealed(key: &str, cubin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 64 + cubin.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&Sha256::digest(key.as_bytes()));
    out.extend_from_slice(&Sha256::digest(cubin));
    out.extend_from_slice(cubin);
    out
}

/// The CUBIN of a cache file written by [`sealed`] for `key`, or why it is not one: a file
/// that is truncated, corrupted, or written for another key is recompiled, never loaded.
fn unsealed(key: &str, bytes: &[u8]) -> std::result::Result<Vec<u8>, &'static str> {
    let head = MAGIC.len() + 64;
    if bytes.len() <= head || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a kernel cache file");
    }
    if bytes[MAGIC.len()..MAGIC.len() + 32] != Sha256::digest(key.as_bytes())[..] {
        return Err("written for other code");
    }
    let cubin = &bytes[head..];
    if bytes[MAGIC.len() + 32..head] != Sha256::digest(cubin)[..] {
        return Err("its content does not match its checksum");
    }
    Ok(cubin.to_vec())
}

/// Makes `dir` (and its parents) as a folder only this user may read or write, and checks that
/// it is one: a real folder, not a link, owned by this user, with no group or other access. A
/// folder that is not is not used (the kernels are compiled in every process instead).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let refused = |why: String| std::io::Error::other(why);
    if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        return Err(refused(format!("cannot create it: {e}")));
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| refused(format!("cannot read it: {e}")))?;
    if !meta.file_type().is_dir() {
        return Err(refused("it is not a folder (a symbolic link is not followed)".into()));
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(refused(format!("it belongs to user {}, not to this process's user {uid}", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        // A folder this user made earlier with looser permissions is tightened.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            refused(format!("its permissions {:o} let others in, and cannot be changed: {e}", meta.mode()))
        })?;
    }
    Ok(())
}

/// Reads `path` if it is a regular file (not a symbolic link).
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

impl KernelCache {
    /// `dir = None` disables the disk cache, and so does a folder that is not private to this
    /// user (see [`private_dir`]; a warning says why).
    pub fn new(ctx: Arc<CudaContext>, info: &DeviceInfo, dir: Option<PathBuf>) -> Self {
        let dir = dir.filter(|d| match private_dir(d) {
            Ok(()) => true,
            Err(why) => {
                log::warn!("the kernel cache folder {} is not used: {why}", d.display());
                false
            }
        });
        KernelCache {
            ctx,
            arch: info.arch(),
            driver_version: info.driver_version,
            versions: format!("driver {} nvrtc {}.{}", info.driver_version, info.nvrtc_version.0, info.nvrtc_version.1),
            dir,
            modules: Mutex::new(HashMap::new()),
            loaded: Mutex::new(HashMap::new()),
            generated: Mutex::new((HashMap::new(), 0)),
            stats: KernelStats::default(),
        }
    }

    pub fn cache_dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// `kernel`, compiling or loading its module on first use.
    pub fn get(&self, kernel: Kernel) -> Result<Arc<LoadedKernel>> {
        if let Some(k) = self.loaded.lock().map_err(|_| gpu_error("kernel cache lock poisoned"))?.get(&kernel) {
            return Ok(Arc::clone(k));
        }
        let function =
            self.module(kernel.module)?.load_function(kernel.name).gpu(format!("loading kernel {kernel}"))?;
        let params = parameter_sizes(&function, kernel, self.driver_version)?;
        let k = Arc::new(LoadedKernel { kernel, function, params });
        let mut loaded = self.loaded.lock().map_err(|_| gpu_error("kernel cache lock poisoned"))?;
        Ok(Arc::clone(loaded.entry(kernel).or_insert(k)))
    }

    pub fn module(&self, module: Module) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().map_err(|_| gpu_error("kernel cache lock poisoned"))?;
        if let Some(m) = modules.get(&module) {
            return Ok(Arc::clone(m));
        }
        let cubin = self.cubin(module.name(), module.source())?;
        let loaded =
            self.ctx.load_module(Ptx::from_binary(cubin)).gpu(format!("loading kernel module {}", module.name()))?;
        modules.insert(module, Arc::clone(&loaded));
        Ok(loaded)
    }

    /// Function `kernel` of a module generated at run time from `source` (which may include the
    /// [`HEADERS`]); compiled once per process, and cached on disk like the built-in modules.
    /// `family` names the generator in the cache's file names (e.g. "filter").
    pub fn generated_function(&self, family: &str, source: &str, kernel: &str) -> Result<CudaFunction> {
        let digest = self.key(family, source);
        let mut guard = self.generated.lock().map_err(|_| gpu_error("kernel cache lock poisoned"))?;
        let (generated, clock) = &mut *guard;
        *clock += 1;
        let module = match generated.get_mut(&digest) {
            Some((m, used)) => {
                *used = *clock;
                Arc::clone(m)
            }
            None => {
                let cubin = self.cubin(&format!("{family}-{digest}"), source)?;
                let loaded = self
                    .ctx
                    .load_module(Ptx::from_binary(cubin))
                    .gpu(format!("loading generated kernel module {family}"))?;
                if generated.len() >= GENERATED_MODULES
                    && let Some(oldest) = generated.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())
                {
                    generated.remove(&oldest);
                }
                generated.insert(digest, (Arc::clone(&loaded), *clock));
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
        let key = self.key(name, source);
        let path = self.dir.as_ref().map(|d| d.join(format!("{name}-{}-{key}.cubin", self.arch)));
        if let Some(p) = &path
            && let Ok(bytes) = read_no_follow(p)
        {
            match unsealed(&key, &bytes) {
                Ok(cubin) => {
                    self.stats.disk_hits.fetch_add(1, Ordering::SeqCst);
                    return Ok(cubin);
                }
                Err(why) => log::warn!("the kernel cache file {} is compiled again: {why}", p.display()),
            }
        }
        let cubin = compile(name, source, &self.arch)?;
        self.stats.compiled.fetch_add(1, Ordering::SeqCst);
        if let Some(p) = &path
            && let Err(e) = write_atomically(p, &sealed(&key, &cubin))
        {
            log::warn!("could not write the kernel cache file {}: {e}", p.display());
        }
        Ok(cubin)
    }
}

/// Writes `bytes` to a new file of a random name beside `path` (created exclusively, readable
/// by this user only), then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let suffix: u64 = rand::random();
    let tmp = path.with_extension(format!("tmp-{suffix:016x}"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|_| f.sync_all());
    drop(f);
    match written.and_then(|_| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
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
    use crate::device::kernel;
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
        first.get(kernel::COPY_U128).unwrap();
        first.get(kernel::FILL_U32).unwrap();
        assert_eq!(first.stats.compiled.load(Ordering::SeqCst), 1, "one module, compiled once");
        assert_eq!(first.stats.disk_hits.load(Ordering::SeqCst), 0);
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(files.len(), 1, "one cached CUBIN");

        let second = KernelCache::new(Arc::clone(gpu.context()), gpu.info(), Some(dir.clone()));
        second.get(kernel::COPY_U128).unwrap();
        assert_eq!(second.stats.compiled.load(Ordering::SeqCst), 0, "second run must not compile");
        assert_eq!(second.stats.disk_hits.load(Ordering::SeqCst), 1, "second run hits the disk cache");

        // A file whose CUBIN was changed is compiled again, not loaded, and rewritten whole.
        let path = files[0].as_ref().unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let third = KernelCache::new(Arc::clone(gpu.context()), gpu.info(), Some(dir.clone()));
        third.get(kernel::COPY_U128).unwrap();
        assert_eq!(third.stats.compiled.load(Ordering::SeqCst), 1, "a tampered file is compiled again");
        assert_eq!(third.stats.disk_hits.load(Ordering::SeqCst), 0);
        assert!(unsealed(&third.key("copy", Module::Copy.source()), &std::fs::read(&path).unwrap()).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sealed file gives back its CUBIN for its own key only; any changed byte, a truncation
    /// or another key is refused.
    #[test]
    fn cache_files_are_verified_on_load() {
        let cubin: Vec<u8> = (0..200u8).collect();
        let file = sealed("key-a", &cubin);
        assert_eq!(unsealed("key-a", &file).unwrap(), cubin);
        assert!(unsealed("key-b", &file).is_err(), "another key");
        for at in [0, 9, MAGIC.len() + 40, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 1;
            assert!(unsealed("key-a", &bad).is_err(), "byte {at} changed");
        }
        assert!(unsealed("key-a", &file[..file.len() - 1]).is_err(), "truncated");
        assert!(unsealed("key-a", &cubin).is_err(), "a bare CUBIN");
    }

    /// The cache folder is made private to this user; a symbolic link in its place is refused,
    /// and so are cache files that are links.
    #[test]
    fn cache_folder_is_private_and_links_are_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let root =
            std::env::temp_dir().join(format!("dfg-private-dir-test-{}-{}", std::process::id(), rand::random::<u32>()));
        let dir = root.join("a").join("kernels");
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "tightened");
        let link = root.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(private_dir(&link).is_err(), "a link to a folder is not used");
        let target = dir.join("target.cubin");
        write_atomically(&target, b"bytes").unwrap();
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read_no_follow(&target).unwrap(), b"bytes");
        let file_link = dir.join("link.cubin");
        std::os::unix::fs::symlink(&target, &file_link).unwrap();
        assert!(read_no_follow(&file_link).is_err(), "a link is not read");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
        let _ = std::fs::remove_dir_all(&root);
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

    /// Every kernel of the catalogue loads from its module, and the driver gives its
    /// parameters: 32- or 64-bit values, as [`crate::device::KArg`] passes them. A launch with
    /// other arguments is refused before it runs.
    #[test]
    fn gpu_every_kernel_loads_with_its_parameters() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_every_kernel_loads_with_its_parameters") else { return };
        for &k in kernel::ALL {
            let loaded = gpu.kernels().get(k).unwrap_or_else(|e| panic!("{k}: {e}"));
            let params = loaded.params.as_ref().expect("the device's driver gives parameter sizes (CUDA 12.4+)");
            assert!(!params.is_empty(), "{k} has no parameters");
            assert!(params.iter().all(|&p| p == 4 || p == 8), "{k}: parameter sizes {params:?}");
        }
        let stream = gpu.stream();
        let buf = gpu.alloc(&stream, 64, "test").unwrap();
        // fill_u32(u32* dst, u32 value, u64 n), given a 64-bit value where the 32-bit one goes.
        let wrong = [crate::device::ptr(&buf, &stream), crate::device::KArg::U64(7), crate::device::KArg::U64(16)];
        let err = gpu.launch_n(&stream, kernel::FILL_U32, 16, &wrong).unwrap_err().to_string();
        assert!(err.contains("fill_u32") && err.contains("[8, 4, 8]"), "{err}");
        let right = [crate::device::ptr(&buf, &stream), crate::device::KArg::U32(7), crate::device::KArg::U64(16)];
        gpu.launch_n(&stream, kernel::FILL_U32, 16, &right).unwrap();
        assert_eq!(gpu.read::<u32>(&stream, &buf, 0, 16).unwrap(), vec![7u32; 16]);
    }
}
