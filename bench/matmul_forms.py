"""GPU: which form of a skinny matmul MLX CUDA runs fastest (a probe for the verify's 2-8 rows).

    python -m bench.matmul_forms --out F.json

For the ~1B and ~6B presets' weight shapes (bench/gpu.py), bf16, weights streamed from memory
(bench/skinny_matmul.time_calls): y = x @ W.T at M rows computed as x @ W.T (the nn.Linear
form), (W @ x.T).T (the weight as the GEMM's tall operand), and with x padded to 8 or 16 rows.
Then the 6.6B forward at B=1, W=1 and W=5, with every linear of 2-8 rows in each form. Prints us
per call and ms per forward; writes JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx.core as mx

from bench.forward_timing import forward_cells, streamed_weights, time_calls, time_forward
from bench.skinny_matmul import PRESETS, shapes

FORMS = {
    "x@W.T": lambda x, w: x @ w.T,
    "(W@x.T).T": lambda x, w: (w @ x.T).T,
    "pad8": lambda x, w: (mx.pad(x, [(0, max(0, 8 - x.shape[0])), (0, 0)]) @ w.T)[: x.shape[0]],
    "pad16": lambda x, w: (mx.pad(x, [(0, max(0, 16 - x.shape[0])), (0, 0)]) @ w.T)[: x.shape[0]],
}


def forwards(repeats: int = 3) -> list[dict]:
    """6.6B forward at B=1 (W=1 and W=5 through the ragged cache) with every linear layer of
    2-8 rows computed in each form."""
    import mlx.nn as nn
    import numpy as np

    from bench.gpu import qwen3_model

    model, _ = qwen3_model(*PRESETS["6b"])
    linear, as_linear = nn.Linear.__call__, nn.Embedding.as_linear
    cells = {W: cell for (_, W), cell in forward_cells(model, [(1, 1), (1, 5)]).items()}
    times: dict[str, list[float]] = {}
    for rep in range(repeats + 1):
        for form, fn in FORMS.items():

            def routed(x, w, fn=fn):  # type: ignore[no-untyped-def]
                M = x.size // x.shape[-1]
                if not 2 <= M <= 8:
                    return None
                return fn(x.reshape(M, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[0])

            def lin(self, x, routed=routed):  # type: ignore[no-untyped-def]
                y = routed(x, self["weight"])
                return linear(self, x) if y is None else y

            def emb(self, x, routed=routed):  # type: ignore[no-untyped-def]
                y = routed(x, self["weight"])
                return as_linear(self, x) if y is None else y

            nn.Linear.__call__, nn.Embedding.as_linear = lin, emb  # type: ignore[method-assign]
            for W, cell in cells.items():
                t = time_forward(model, cell)
                if rep:
                    times.setdefault(f"{form} W={W}", []).append(t)
            nn.Linear.__call__, nn.Embedding.as_linear = linear, as_linear  # type: ignore[method-assign]
    rows = [{"cell": k, "ms": 1e3 * float(np.median(v))} for k, v in times.items()]
    for r in rows:
        print(f"6b B=1 forward {r['cell']}: {r['ms']:.2f} ms", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/matmul_forms.json")
    ap.add_argument("--rows", default="1,2,5,8")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    out = []
    for preset, (hidden, _) in PRESETS.items():
        for name, (N, K) in shapes(hidden).items():
            ws = streamed_weights(N, K)
            for M in (int(r) for r in args.rows.split(",")):
                x = mx.random.normal((M, K)).astype(mx.bfloat16)
                row = {"preset": preset, "weight": name, "N": N, "K": K, "M": M}
                for form, fn in FORMS.items():
                    row[form] = 1e6 * time_calls(fn, [x] * len(ws), ws, args.reps)
                print(preset, f"{name:8s}", f"M={M}", "  ".join(
                    f"{f} {row[f]:6.1f}" for f in FORMS), flush=True)  # fmt: skip
                out.append(row)
            del ws
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fwd = forwards()
    Path(args.out).write_text(
        json.dumps({"device": str(mx.default_device()), "rows": out, "forwards": fwd})
    )


if __name__ == "__main__":
    main()
