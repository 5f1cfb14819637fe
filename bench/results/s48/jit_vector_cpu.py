"""MLX's compiled CPU kernels built three ways, alternating processes, each its own kernel cache.

    LD_PRELOAD=.../libblis.so.4 BLIS_NUM_THREADS=1 PYTHONPATH=. \
        python bench/results/s48/jit_vector_cpu.py [ROUNDS] > jit_vector_cpu.json

Modes: `baseline` (MLX's own `g++ -O3`, SPECFLEET_CPU_JIT_FLAGS=0), `fma` (stop 47's wrapper
flags: -mavx2 -mfma -mf16c -ffp-contract=off), `vector` (workers/cpu_jit.py's flags now: those,
and --param=max-inline-insns-auto=200 -fno-trapping-math). Each child times, warm, medians in ms:
mlx-lm's compiled SwiGLU at a 150-token prefill's [150, 768] and at a verify's [6, 768]; the
shifted exponentials of workers/cpu_ops.py's split softmax at [4, 150, 150]; the default model's
prefill of a 150-token prompt (prefill_chunk, evaluated); a one-token plain step and a 6-token
verify forward at 150 positions. Every mode's outputs are also hashed: the same bits in all
three or the script says not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FMA_ONLY = ("-mavx2", "-mfma", "-mf16c", "-ffp-contract=off")

CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from workers import cpu_jit
if sys.argv[1] == "fma":
    cpu_jit.FLAGS = tuple(sys.argv[2].split())
import mlx.core as mx
from mlx_lm.models.activations import swiglu
from workers.engine import Engine
from workers.kv_cache import BatchCache
from workers.forward import prefill_chunk, forward_window
from workers.cpu_ops import _shifted_exp
eng = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)  # installs the wrapper
m = eng.model
def med(f, reps=30):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); mx.eval(f()); ts.append(time.perf_counter() - t0)
    return round(1e3 * float(np.median(ts)), 4)
out, bits = {}, hashlib.sha256()
for name, shape in (("swiglu_150x768", (1, 150, 768)), ("swiglu_6x768", (1, 6, 768))):
    g = mx.random.normal(shape, key=mx.random.key(0)) * 4
    x = mx.random.normal(shape, key=mx.random.key(1))
    out[name] = med(lambda: swiglu(g, x))
    bits.update(np.array(swiglu(g, x)).tobytes())
s = mx.random.normal((1, 4, 150, 150), key=mx.random.key(2)) * 8
mx.eval(s)
mx_max = mx.max(s, axis=-1, keepdims=True)
out["softmax_exp_4x150x150"] = med(lambda: _shifted_exp(s, mx_max))
bits.update(np.array(_shifted_exp(s, mx_max)).tobytes())
rng = np.random.default_rng(0)
seq = rng.integers(1, 2000, 151).tolist()
def prefilled():
    c = BatchCache.for_model(m, 1, None)
    prefill_chunk(m, c, [seq], 0, 150)
    return c
out["prefill_150"] = med(lambda: prefilled().state_arrays(), 20)
c = prefilled(); mx.eval(c.state_arrays())
bits.update(np.array(c.layers[0].keys[..., :150, :]).tobytes())
def step(width):
    tok = mx.array([seq[150:151] * width], dtype=mx.int32)
    logits = forward_window(m, c, tok, np.array([width]))
    return logits
for w in (1, 6):
    out[f"forward_{w}_at_150"] = med(lambda: step(w))
    bits.update(np.array(step(w)).tobytes())
out["bits"] = bits.hexdigest()[:16]
print(json.dumps(out))
"""


def child(mode: str, tmp: Path) -> dict:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT),
           "XDG_CACHE_HOME": str(tmp / "cache")}  # fmt: skip
    env["SPECFLEET_CPU_JIT_FLAGS"] = "0" if mode == "baseline" else "1"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, " ".join(FMA_ONLY)], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    modes = ("baseline", "fma", "vector")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as d:
        tmps = {m: Path(d) / m for m in modes}
        for t in tmps.values():
            t.mkdir()
        for r in range(rounds):
            for m in modes if r % 2 == 0 else reversed(modes):
                runs[m].append(child(m, tmps[m]))
                print(m, runs[m][-1], file=sys.stderr)
    keys = [k for k in runs["vector"][0] if k != "bits"]
    median = {m: {k: sorted(x[k] for x in runs[m])[len(runs[m]) // 2] for k in keys} for m in modes}
    same_bits = len({x["bits"] for m in modes for x in runs[m]}) == 1
    print(json.dumps({
        "machine": "2-core AMD EPYC VM, MLX 0.32.4 CPU, fp32, BLIS 1 thread",
        "rounds": rounds, "same_bits_in_every_mode": same_bits,
        "median_ms": median, "runs": runs,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
