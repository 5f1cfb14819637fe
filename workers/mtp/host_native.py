"""HostHead's step in C (workers/mtp/host_step.c), built once per machine with its C compiler.

The NumPy step (host_head.py) makes ~40 NumPy calls of 1-5 us each around ~60 us of products;
one call into C does the same arithmetic (other summation orders: drafts only decide how many
tokens a round emits). Built with `cc -O3` (plus the units workers/cpu_jit.py builds MLX's
kernels for, where the CPU has them) into `$XDG_CACHE_HOME/specfleet` (default
`~/.cache/specfleet`), keyed by the source's and flags' hash. That directory must be the user's
own and writable by no one else, since what it holds is loaded as code
(`cpu_jit.private_cache_dir`); otherwise the build goes to a private temporary directory, once a
process. Where no compiler is found or the build fails, HostHead keeps its NumPy step.
SPECFLEET_NATIVE_HEAD=0 keeps it too (read once a process, at the first HostHead).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ENV = "SPECFLEET_NATIVE_HEAD"  # "0": HostHead steps in NumPy
SOURCE = Path(__file__).with_name("host_step.c")
NORMS = ("e", "h", "ln1", "ln2", "q", "k", "out")  # host_step.c's order

_f32p = ctypes.POINTER(ctypes.c_float)


class _Head(ctypes.Structure):
    """host_step.c's `Head`."""

    _fields_ = [
        *[(n, ctypes.c_int64) for n in ("H", "NH", "NK", "D", "F", "V", "post_norm")],
        ("scale", ctypes.c_double),
        ("eps", ctypes.c_double * 7),
        ("norm", _f32p * 7),
        *[(n, _f32p) for n in ("embed", "fc", "q_proj", "kv_proj", "o_proj", "gate_up", "down")],
    ]


def _flags() -> list[str]:
    """-O3, and the units workers/cpu_jit.py builds MLX's kernels for where the CPU has them
    (not its -ffp-contract=off: these products need no bits of MLX's)."""
    from workers.cpu_jit import CPU_FEATURES, FLAGS, cpu_features

    flags = ["-O3", "-std=gnu11", "-shared", "-fPIC"]
    if platform.machine() in ("x86_64", "AMD64") and set(CPU_FEATURES) <= cpu_features():
        flags += [f for f in FLAGS if f.startswith("-m")]
    return flags


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built step, or None (no compiler, a failed build, or ENV "0")."""
    from workers.backend import Backend

    if not Backend.current().wants(ENV, default=True):
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    flags = _flags()
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    lib = _cache_dir() / f"host_step_{key}.so"
    if not lib.exists():
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")  # then renamed: concurrent builds race safely
        run = subprocess.run([cc, *flags, str(SOURCE), "-o", str(tmp), "-lm"], capture_output=True)
        if run.returncode != 0:
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, lib)
    dll = ctypes.CDLL(str(lib))
    fn = dll.specfleet_head_step
    fn.restype = ctypes.c_int
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    # Arrays go as addresses (`ndarray.ctypes.data`, an int): typed pointers (`data_as`) cost
    # ~5 us each, 56 of a B = 1 step's 112 us for its 11 arrays.
    fn.argtypes = [ctypes.POINTER(_Head), i64, i64, ptr, ptr, ptr, ptr, ptr, ptr, i64, ptr, ptr,
                   ptr, ptr]  # fmt: skip
    return dll


def _cache_dir() -> Path:
    """The user's own cache directory for the build, or a private temporary one."""
    from workers.cpu_jit import private_cache_dir

    return private_cache_dir() or Path(tempfile.mkdtemp(prefix="specfleet-"))


def _ptr(a: np.ndarray, kind: Any = _f32p) -> Any:
    return a.ctypes.data_as(kind)


class NativeStep:
    """HostHead.step's arithmetic in one C call; holds the weights it points at."""

    def __init__(self, dll: ctypes.CDLL, host: Any) -> None:
        self._fn = dll.specfleet_head_step
        norms = [host.norms[n] for n in NORMS]
        self._keep = [np.ascontiguousarray(w, dtype=np.float32) for w, _ in norms]
        # HostLinear's [in, out] float32 copies, the ones NumPy's route reads: no second copy
        weights = {n: np.ascontiguousarray(getattr(host, n).io, dtype=np.float32) for n in
                   ("fc", "q_proj", "kv_proj", "o_proj", "gate_up", "down")}  # fmt: skip
        embed = host.embed
        if not embed.flags.c_contiguous:
            embed = np.ascontiguousarray(embed)
        self._keep += [*weights.values(), embed]
        self.head = _Head(
            H=embed.shape[1], V=embed.shape[0], NH=host.nh, NK=host.nk, D=host.d,
            F=weights["down"].shape[0], post_norm=int(host.post_norm), scale=host.scale,
            eps=(ctypes.c_double * 7)(*[eps for _, eps in norms]),
            norm=(_f32p * 7)(*[_ptr(w) for w in self._keep[:7]]),
            embed=_ptr(embed), **{n: _ptr(w) for n, w in weights.items()},
        )  # fmt: skip

    def __call__(
        self,
        hidden: np.ndarray,
        tokens: np.ndarray,
        cache: Any,
        last: np.ndarray | None,
        cos: np.ndarray,
        sin: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """As HostHead.step, with the RoPE tables [positions, D/2] covering every position."""
        B, W, H = hidden.shape
        for name in ("k", "v"):  # written in place, [B, S, NK, D] row-major
            if not getattr(cache, name).flags.c_contiguous:
                setattr(cache, name, np.ascontiguousarray(getattr(cache, name)))
        hidden = np.ascontiguousarray(hidden, dtype=np.float32)
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        lengths = np.ascontiguousarray(cache.lengths, dtype=np.int64)
        chain = np.empty((B, 0 if last is None else 1, H), dtype=np.float32)
        normed = np.empty_like(chain)
        at = None if last is None else np.ascontiguousarray(last, dtype=np.int64)
        rc = self._fn(
            ctypes.byref(self.head), B, W, hidden.ctypes.data, tokens.ctypes.data,
            lengths.ctypes.data, None if at is None else at.ctypes.data,
            cache.k.ctypes.data, cache.v.ctypes.data, cache.k.shape[1], cos.ctypes.data,
            sin.ctypes.data, chain.ctypes.data, normed.ctypes.data,
        )  # fmt: skip
        if rc == -1:
            raise MemoryError("the native MTP head step could not allocate its scratch")
        if rc != 0:  # the callers' contract broken: the C step reads and writes unchecked
            raise ValueError(
                f"native MTP head step: tokens {tokens.min()}..{tokens.max()} (vocabulary "
                f"{self.head.V}), last {at}, lengths {lengths} + {W} pairs (slots "
                f"{cache.k.shape[1]}): a token, pair or slot out of range"
            )
        return chain, normed
