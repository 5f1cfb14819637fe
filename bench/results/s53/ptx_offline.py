"""Stop 53, no GPU needed: compile workers/attention_cuda.py's window kernel, and stop 52's form
(kept in device/kernel_ab_gpu.py), with NVIDIA's NVRTC to PTX and ptxas for sm_90 (an H100 /
H200), to read registers a thread and the key loops' instructions side by side.

    python3 -m venv /tmp/nv && /tmp/nv/bin/pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 \
        nvidia-cuda-runtime-cu12
    PYTHONPATH=. .venv/bin/python bench/results/s53/ptx_offline.py \
        --nvidia /tmp/nv/lib/python3.11/site-packages/nvidia > bench/results/s53/ptx_offline.txt

The signature mimics what mx.fast.cuda_kernel generates (pointers, strides as by-value
__grid_constant__ structs of 10 int64). NVRTC 12.9 here; the H200's MLX build used CUDA 13,
whose register counts may differ (head dim 256, 8 queries: 190 here, over 227 there).
"""

from __future__ import annotations

import argparse
import ctypes
import re
import subprocess
from collections import Counter
from pathlib import Path

from workers.attention_cuda import _merged_at_once, warps_that_fit

ROOT = Path(__file__).resolve().parents[3]
HEADER = r"""
#include <cuda_bf16.h>
#define INFINITY __int_as_float(0x7f800000)
struct Strides { long long v[10]; __device__ long long operator[](int i) const { return v[i]; } };
"""
S = "const __grid_constant__ Strides"
P = "const __nv_bfloat16*"


def sources() -> tuple[str, str]:
    def body(path: Path, var: str) -> str:
        return path.read_text().split(f'{var} = r"""')[1].split('"""')[0]

    new = body(ROOT / "workers/attention_cuda.py", "_SOURCE")
    old = body(Path(__file__).parent / "device/kernel_ab_gpu.py", "BEFORE_SOURCE")
    return new, old


def program(W: int, NW: int, D: int) -> str:
    new, old = sources()
    merged = _merged_at_once(W, NW, D)  # the kernel's C, as ragged_window_attention passes it
    return (
        HEADER
        + f"""
template <typename T, int W, int HQ, int HK, int D, int NW, int C>
__global__ void after(const T* q, {S} q_strides, const T* k, {S} k_strides, const T* v,
    {S} v_strides, const int* lengths, const float* scale, T* out) {{ {new} }}
template <typename T, int W, int HQ, int HK, int D, int NW, int U>
__global__ void before(const T* q, const T* k, {S} k_strides, const T* v, {S} v_strides,
    const int* lengths, const float* scale, T* out) {{ {old} }}
template __global__ void after<__nv_bfloat16,{W},32,16,{D},{NW},{merged}>({P}, {S}, {P}, {S}, {P}, {S},
    const int*, const float*, __nv_bfloat16*);
template __global__ void before<__nv_bfloat16,{W},32,16,{D},{NW},1>({P}, {P}, {S}, {P}, {S},
    const int*, const float*, __nv_bfloat16*);
"""
    )


def compile_ptx(nvidia: Path, src: str) -> str:
    nvrtc = ctypes.CDLL(str(nvidia / "cuda_nvrtc/lib/libnvrtc.so.12"))
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_90", f"-I{nvidia}/cuda_runtime/include".encode()]
    if nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.value.decode())
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(prog, ptx)
    return ptx.value.decode()


def registers(nvidia: Path, ptx: str) -> dict[str, int]:
    path = Path("/tmp/specfleet_window.ptx")
    path.write_text(ptx)
    err = subprocess.run([str(nvidia / "cuda_nvcc/bin/ptxas"), "-arch=sm_90", "-v", str(path),
                          "-o", "/dev/null"], capture_output=True, text=True).stderr  # fmt: skip
    found = re.findall(r"entry function '_Z\d+(after|before)\w*'.*?Used (\d+) registers", err, re.S)
    return {name: int(n) for name, n in found}


def key_loop_ops(ptx: str) -> dict[str, Counter]:
    """Instructions of each form's key loop (the first loop that loads from global memory)."""
    out = {}
    for entry in ptx.split(".entry ")[1:]:
        name = "after" if entry.startswith("_Z5after") else "before"
        lines = entry.splitlines()
        labels = {
            m.group(1): i for i, x in enumerate(lines) if (m := re.match(r"\s*(\$L__\w+):", x))
        }
        for i, x in enumerate(lines):
            m = re.search(r"bra(?:\.uni)?\s+(\$L__\w+);", x)
            if m and labels.get(m.group(1), i) < i:
                body = lines[labels[m.group(1)] : i + 1]
                if any("ld.global" in b for b in body):
                    ops = [b.split()[0] for b in body if b.strip() and not b.strip().endswith(":")]
                    out[name] = Counter(ops)
                    break
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvidia", type=Path, required=True, help="site-packages/nvidia")
    args = ap.parse_args()
    ptx = compile_ptx(args.nvidia, program(1, 16, 128))
    loops = key_loop_ops(ptx)
    print("W = 1, 16 warps, head dim 128: registers", registers(args.nvidia, ptx))
    print("  key loop instructions: after", sum(loops["after"].values()), "before",
          sum(loops["before"].values()), "same mix:", loops["after"] == loops["before"])  # fmt: skip
    for D in (64, 128, 256):
        cells = []
        for W in range(1, 9):
            nw = warps_that_fit(W, D)
            r = registers(args.nvidia, compile_ptx(args.nvidia, program(W, nw, D)))["after"]
            cells.append(f"W={W}: {nw} warps, {r} regs (fits {65536 // (32 * ((r + 7) // 8 * 8))})")
        print(f"D={D}:", "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
