"""s64: what makes a 6.6B W=5 verify forward's host work dearer than a W=1 step's (H200, B=1).

    python3 bench/results/s64/device/verify_host_split.py --out F.json

The engine's forward with its routes (workers/routes.py), B = 1, 128 tokens in the cache, timed
as bench.verify_parts times it (pipelined, build, encode), under variants of one part each:
- as_engine: as the engine runs;
- kv_contig: the window's keys and values made contiguous before the cache's scatter;
- kv_slice: B = 1 only: the window written with one dynamic slice_update at the row's length
  instead of put_along_axis (an upper bound on what a cheaper write could save);
- no_write: the window not written (attention reads the cache as it was; the keys' norm and
  RoPE go dead with it);
- skinny_off / stacked_off: those linear routes removed.
Also the primitives of each forward's graph by name (W = 1 against W = 5, as_engine).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from bench.forward_timing import forward_cells, time_forward_pipelined, time_host  # noqa: E402
from bench.gpu import PRESETS, qwen3_model  # noqa: E402
from bench.graph_ops import primitives  # noqa: E402
from workers import kv_layers, routes, skinny_linear, stacked_linears  # noqa: E402
from workers.backend import Backend  # noqa: E402
from workers.forward import forward_window  # noqa: E402

REAL_WRITE = kv_layers._write
REAL_UPDATE = kv_layers.RaggedKVCache.update_and_fetch


def contig_write(stored, new, slots):
    return REAL_WRITE(stored, mx.contiguous(new), slots)


def slice_update_and_fetch(self, keys, values):
    W = keys.shape[2]
    needed = self.owner.window_end(W)
    start = self.owner.lengths_mx[:1].astype(mx.int32)

    def store(parts, new):
        parts = kv_layers.reserve_slots(parts, new, needed)
        return [mx.slice_update(p, n, start, axes=(2,)) for p, n in zip(parts, new)]

    self.key_parts = store(self.key_parts, self.encode(keys))
    self.value_parts = store(self.value_parts, self.encode(values))
    return self.fetch(self.key_parts, needed), self.fetch(self.value_parts, needed)


def read_only(self, keys, values):
    needed = self.owner.window_end(keys.shape[2])
    return self.fetch(self.key_parts, needed), self.fetch(self.value_parts, needed)


def set_variant(model, name):
    kv_layers._write = contig_write if name == "kv_contig" else REAL_WRITE
    update = {"kv_slice": slice_update_and_fetch, "no_write": read_only}.get(name, REAL_UPDATE)
    kv_layers.RaggedKVCache.update_and_fetch = update
    routes.install(model, Backend.current())
    if name == "skinny_off":
        skinny_linear.remove(model)
    if name == "stacked_off":
        stacked_linears.remove(model)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="6b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--variants", default="as_engine,kv_contig,kv_slice,no_write,skinny_off,stacked_off"
    )
    args = ap.parse_args()
    model, _ = qwen3_model(*PRESETS[args.preset])
    routes.install(model, Backend.current())
    cells = {W: c for (_, W), c in forward_cells(model, [(1, 1), (1, 5)], vocab=32000).items()}
    prims = {}
    for W, (cache, tokens, valid) in cells.items():
        prims[W] = primitives([forward_window(model, cache, tokens, valid)])
        mx.eval(forward_window(model, cache, tokens, valid))
    names = sorted(set(prims[1]) | set(prims[5]), key=lambda n: -(prims[5][n] - prims[1][n]))
    print("primitives W=1 / W=5:", sum(prims[1].values()), sum(prims[5].values()))
    for n in names:
        if prims[5][n] != prims[1][n]:
            print(f"  {n:40s} {prims[1][n]:5d} {prims[5][n]:5d}")
    variants = args.variants.split(",")
    times: dict[str, list[float]] = collections.defaultdict(list)
    for rep in range(args.repeats + 1):
        for name in variants if rep % 2 else variants[::-1]:
            set_variant(model, name)
            for W, cell in cells.items():
                pipe = time_forward_pipelined(model, cell)
                build, encode = time_host(model, cell)
                if rep:
                    for how, t in (("pipelined", pipe), ("build", build), ("encode", encode)):
                        times[f"{name} W={W} {how}"].append(t)
    set_variant(model, "as_engine")
    rows = []
    for name in variants:
        row = {"variant": name}
        for W in (1, 5):
            for how in ("pipelined", "build", "encode"):
                row[f"w{W}_{how}_ms"] = 1e3 * float(np.median(times[f"{name} W={W} {how}"]))
        rows.append(row)
        print(
            f"{name:12s} "
            + "  ".join(
                f"W={W} pipe {row[f'w{W}_pipelined_ms']:5.2f} build {row[f'w{W}_build_ms']:5.2f}"
                f" enc {row[f'w{W}_encode_ms']:5.2f}"
                for W in (1, 5)
            ),
            flush=True,
        )
    Path(args.out).write_text(
        json.dumps(
            {
                "device": str(mx.default_device()),
                "preset": args.preset,
                "rows": rows,
                "primitives": {str(W): dict(p) for W, p in prims.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
