"""Stop 54 review, no GPU needed: the window kernel with the merge store's redundant index guard
removed (`o[i0 + c < W ? i0 + c : 0]` inside `if (i0 + c < W)`) compiles to the same PTX as
before (NVRTC 12.9, compute_90) at six (W, warps, head dim) shapes. Compares the kernel in
commit 27dffd9 with the working tree's:

    PYTHONPATH=. python bench/results/s54/ptx_same_offline.py SITE_PACKAGES/nvidia
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

from workers.attention_cuda import _merged_at_once

spec = importlib.util.spec_from_file_location("po", "bench/results/s53/ptx_offline.py")
assert spec is not None and spec.loader is not None
po = importlib.util.module_from_spec(spec)
spec.loader.exec_module(po)


def kernel(text: str) -> str:
    return text.split('_SOURCE = r"""')[1].split('"""')[0]


def ptx(nvidia: Path, body: str, W: int, NW: int, D: int) -> str:
    C = _merged_at_once(W, NW, D)
    src = (
        po.HEADER
        + f"""
template <typename T, int W, int HQ, int HK, int D, int NW, int C>
__global__ void after(const T* q, {po.S} q_strides, const T* k, {po.S} k_strides, const T* v,
    {po.S} v_strides, const int* lengths, const float* scale, T* out) {{ {body} }}
template __global__ void after<__nv_bfloat16,{W},32,16,{D},{NW},{C}>({po.P}, {po.S}, {po.P},
    {po.S}, {po.P}, {po.S}, const int*, const float*, __nv_bfloat16*);
"""
    )
    return po.compile_ptx(nvidia, src)


nvidia = Path(sys.argv[1])
git = ["git", "show", "27dffd9:workers/attention_cuda.py"]
before = kernel(subprocess.run(git, capture_output=True, text=True, check=True).stdout)
after = kernel(Path("workers/attention_cuda.py").read_text())
for W, NW, D in [(1, 16, 128), (5, 16, 128), (8, 13, 128), (5, 4, 128), (3, 16, 64), (7, 9, 256)]:
    same = ptx(nvidia, before, W, NW, D) == ptx(nvidia, after, W, NW, D)
    print(f"W={W} warps={NW} head dim={D}: identical PTX {same}")
