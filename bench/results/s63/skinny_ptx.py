"""Stop 63, no GPU needed: compile workers/skinny_linear.py's kernel (every split S) with NVRTC
to PTX and ptxas for sm_90, for the registers a thread at each (M, R, U, S) it may take.

    python3 -m venv /tmp/nv && /tmp/nv/bin/pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 \
        nvidia-cuda-runtime-cu12
    PYTHONPATH=. .venv/bin/python bench/results/s63/skinny_ptx.py --nvidia /tmp/nv/lib/python3.11/site-packages/nvidia
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s53"))
from ptx_offline import compile_ptx  # noqa: E402

from workers.skinny_linear import SOURCE, WARPS  # noqa: E402

HEADER = "#include <cuda_bf16.h>\n"


def program(M: int, N: int, K: int, R: int, U: int, S: int) -> str:
    KS = -(-K // (S * 256)) * 256
    return HEADER + (
        f"template <typename T, int M, int N, int K, int R, int U, int NW, int S, int KS>\n"
        f"__global__ void skinny(const T* x, const T* w, T* y) {{ {SOURCE} }}\n"
        f"template __global__ void skinny<__nv_bfloat16,{M},{N},{K},{R},{U},{WARPS},{S},{KS}>"
        "(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*);\n"
    )


def registers(nvidia: Path, ptx: str) -> str:
    path = Path("/tmp/specfleet_skinny.ptx")
    path.write_text(ptx)
    err = subprocess.run([str(nvidia / "cuda_nvcc/bin/ptxas"), "-arch=sm_90", "-v", str(path),
                          "-o", "/dev/null"], capture_output=True, text=True).stderr  # fmt: skip
    return " ".join(re.findall(r"Used \d+ registers[^\n]*", err))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvidia", type=Path, required=True, help="site-packages/nvidia")
    args = ap.parse_args()
    for M in (2, 5, 8):
        for R, U in ((4, 2), (2, 4), (4, 4)):
            for S in (1, 2, 4, 8):
                ptx = compile_ptx(args.nvidia, program(M, 4096, 4096, R, U, S))
                print(f"M={M} R={R} U={U} S={S}: {registers(args.nvidia, ptx)}", flush=True)


if __name__ == "__main__":
    main()
