"""Stop 50: what a membership change of the running cache costs, against writing only the
rows that change: the default model's 10 layers (keys and values, 2 KV heads x 64, fp32) at 16
rows x 512 slots, medians of 15 evaluations, each timing from cache arrays already evaluated.

    LD_PRELOAD=... python bench/results/s50/row_ops_cpu.py
"""

import time
from collections.abc import Callable

import mlx.core as mx

L, B, H, S, D = 10, 16, 2, 512, 64
Op = Callable[[list[mx.array]], list[mx.array]]


def median_ms(op: Op, reps: int = 15) -> float:
    times = []
    for _ in range(reps):
        parts = [mx.random.normal((B, H, S, D)) for _ in range(2 * L)]
        mx.eval(parts)
        t0 = time.perf_counter()
        out = op(parts)
        parts.clear()  # no reference left but the op's: MLX may update buffers in place
        mx.eval(out)
        times.append(time.perf_counter() - t0)
    return sorted(times)[reps // 2] * 1e3


keep = mx.array([i for i in range(B) if i not in (3, 7)], dtype=mx.int32)
src, dest = mx.array([15, 14], dtype=mx.int32), [3, 7]
joiners = [mx.random.normal((4, H, 300, D)) for _ in range(2 * L)]
mx.eval(joiners)


def gather(parts: list[mx.array]) -> list[mx.array]:
    return [p[keep] for p in parts]


def moved_rows(parts: list[mx.array]) -> list[mx.array]:
    rows = [p[src] for p in parts]
    mx.eval(rows)  # evaluated first: a lazy gather of p would keep p's buffer from donation
    return rows


def scatter_rows(parts: list[mx.array]) -> list[mx.array]:
    index = mx.broadcast_to(mx.array(dest)[:, None, None, None], (2, H, S, D))
    return [mx.put_along_axis(p, index, r, axis=0) for p, r in zip(parts, moved_rows(parts))]


def slice_update_rows(parts: list[mx.array]) -> list[mx.array]:
    out = []
    for p, r in zip(parts, moved_rows(parts)):
        for k, i in enumerate(dest):
            p = mx.slice_update(p, r[k : k + 1], mx.array([i, 0, 0, 0]), axes=(0, 1, 2, 3))
        out.append(p)
    return out


def concatenate(parts: list[mx.array]) -> list[mx.array]:
    return [
        mx.concatenate([p[:12], mx.pad(n, [(0, 0), (0, 0), (0, S - 300), (0, 0)])])
        for p, n in zip(parts, joiners)
    ]


def into_spare_rows(parts: list[mx.array]) -> list[mx.array]:
    return [
        mx.slice_update(p, n, mx.array([12, 0, 0, 0]), axes=(0, 1, 2, 3))
        for p, n in zip(parts, joiners)
    ]


print(f"2 of 16 rows leave, gather the 14 others (before): {median_ms(gather):.2f} ms")
print(
    f"2 of 16 rows leave, the last 2 scattered into their places: {median_ms(scatter_rows):.2f} ms"
)
print(
    f"2 of 16 rows leave, the last 2 slice-updated into their places (now): {median_ms(slice_update_rows):.2f} ms"
)
print(f"4 rows join 12, concatenated (before): {median_ms(concatenate):.2f} ms")
print(f"4 rows join 12, written into spare rows (now): {median_ms(into_spare_rows):.2f} ms")
