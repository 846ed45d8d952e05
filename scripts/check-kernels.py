#!/usr/bin/env python3
"""Compile every kernels/*.cu with NVRTC for sm_90, without a GPU, and print the errors and each
kernel's registers, shared memory and spills (ptxas -v).

NVRTC needs no device to compile, so kernel syntax and resource use can be checked on a machine
without a GPU before spending device time. Point NVRTC_LIB at libnvrtc.so.13, e.g. from the
`nvidia-cuda-nvrtc` wheel:

    pip download --no-deps --only-binary=:all: "nvidia-cuda-nvrtc==13.0.*" -d /tmp/nvrtc
    (cd /tmp/nvrtc && python3 -m zipfile -e *.whl x)
    NVRTC_LIB=/tmp/nvrtc/x/nvidia/cu13/lib/libnvrtc.so.13 python3 scripts/check-kernels.py [name...]

The options match src/device/kernels.rs (-std=c++17 --device-int128). Exit status 1 if any file
fails to compile.
"""
import ctypes
import os
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
kdir = root / "kernels"
nvrtc_path = os.environ.get("NVRTC_LIB", "libnvrtc.so.13")
# NVRTC loads libnvrtc-builtins from its own folder only through the loader's path: preload it.
for builtins in Path(nvrtc_path).parent.glob("libnvrtc-builtins.so.*"):
    if ".alt." not in builtins.name:
        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(nvrtc_path)
arch = os.environ.get("ARCH", "sm_90")

headers = sorted(kdir.glob("*.cuh"))
hsrc = [(ctypes.c_char_p * len(headers))(*[h.read_bytes() for h in headers])]
hname = [(ctypes.c_char_p * len(headers))(*[h.name.encode() for h in headers])]


def log_of(prog):
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace")


failed = 0
wanted = set(sys.argv[1:])
for cu in sorted(kdir.glob("*.cu")):
    if wanted and cu.stem not in wanted:
        continue
    prog = ctypes.c_void_p()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), cu.read_bytes(), cu.name.encode(), len(headers), hsrc[0], hname[0])
    assert r == 0, f"nvrtcCreateProgram: {r}"
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"--device-int128", b"--ptxas-options=-v"]
    r = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    log = log_of(prog)
    status = "ok" if r == 0 else f"FAILED ({r})"
    print(f"== {cu.name}: {status}")
    for line in log.splitlines():
        # Keep errors, warnings and the per-kernel resource lines short.
        if "error" in line or "warning" in line or "Used" in line or "spill" in line and "0 bytes spill" not in line:
            print("  " + line.strip())
        elif "Compiling entry function" in line:
            print("  " + line.strip().replace("ptxas info    : ", ""))
    if r != 0:
        failed += 1
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
sys.exit(1 if failed else 0)
