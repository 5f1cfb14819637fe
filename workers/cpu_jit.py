"""MLX CPU kernels built for the x86-64 CPU they run on (AVX2, FMA, F16C), same bits.

`mx.compile` on MLX's CPU backend writes each fused elementwise chain (mlx-lm's SwiGLU, the
sigmoid of a gate, a residual add) as C++ and builds it with `g++ -std=c++17 -O3 -shared`, no
target flags in MLX 0.32.4. On x86-64 that is the baseline ISA, where every `std::fma` in MLX's
`simd::exp` polynomial is a call into libm's `fmaf`: a fused SiLU x gate over [16, 16, 768] fp32
took 3.39 ms, 17 ns an element (2-core AMD EPYC VM). perf on a B=16 plain round of the default
model put 8.5% of the samples in the compiled SiLU kernel and 7% in libm's `fmaf`. MLX built
for AVX2 adds `-mavx2 -mfma -mf16c` to that command itself (upstream jit_compiler.cpp); the
0.32.4 wheels are not, so this route adds them, through a `g++` wrapper first on PATH (MLX runs
`g++` through the shell; it has no setting for its flags). The same kernel then took 1.90 ms.

Same bits: GCC contracts `a * b + c` into one FMA once FMA is allowed, even with -std=c++17,
which changed 34k of 113k outputs of a compiled `a * b + a` against MLX's uncompiled ops. So the
wrapper also passes `-ffp-contract=off`: the only FMAs are the `std::fma` calls MLX's source
makes, which libm's `fmaf` rounds the same way (both round the fused result once). Tested:
kernels built through the wrapper equal the uncompiled ops and the baseline build bit for bit
(tests/workers/engine/test_cpu_jit.py).

Vectorised: with those flags alone GCC still ran each kernel one element at a time, calling
`simd::exp<float, 1>` out of line for every element (too big for its default inlining limit),
and once inlined it still kept the loop scalar ("control flow in loop": the `select`s of the
exponential's NaN and range checks stay branches while a float operation may trap). The wrapper
also passes `--param=max-inline-insns-auto=200` (inline it) and `-fno-trapping-math` (assume no
float op traps; no value changes: every operation rounds as IEEE says, only the exception flags
are not kept exact), and GCC then runs the loop 8 floats at a time. The SiLU x gate kernel of a
150-token prefill ([150, 768] in each of 10 layers) went from 13.97 to 1.50 ms, bit for bit
(NaN, infinities, +-88, denormals included).

Where: Linux x86-64, MLX's CPU backend, a CPU with avx2, fma and f16c, g++ on PATH, unless
`SPECFLEET_CPU_JIT_FLAGS=0`. MLX keeps built kernels in `$TMPDIR/mlx/<version>/cpu` by name, not
by flags, and would reuse kernels an earlier build (without the wrapper, or with other flags)
left there: slower, same bits. So `install` retires them once per set of flags: it deletes the
built libraries (`lib*.so`; a process that has one loaded keeps its mapping) and leaves a stamp
naming the flags, under a lock, so the next kernels are built through this wrapper.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import platform
import shutil
from pathlib import Path

ENV = "SPECFLEET_CPU_JIT_FLAGS"  # "0": leave MLX's JIT command as it is
FLAGS = (
    "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off",
    "--param=max-inline-insns-auto=200", "-fno-trapping-math",
)  # fmt: skip
CPU_FEATURES = ("avx2", "fma", "f16c")  # /proc/cpuinfo names the FLAGS need
MARK = "# specfleet workers/cpu_jit.py"  # first line after the shebang: our wrapper


@functools.cache
def cpu_features() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def wanted() -> bool:
    """Where the wrapper applies: MLX's CPU backend on Linux x86-64 with the CPU's units,
    unless ENV is "0" (the routes' switch, `Backend.wants`)."""
    from workers.backend import Backend
    from workers.cpu_ops import on_cpu

    if not (on_cpu() and Backend.current().wants(ENV, default=True)):
        return False
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    return set(CPU_FEATURES) <= cpu_features()


def private_cache_dir() -> Path | None:
    """specfleet's directory in the user's cache (`$XDG_CACHE_HOME`, default `~/.cache`), made
    if missing; None where there is no home, it cannot be made, or others may write to it:
    what it holds runs as code (this module's `g++` wrapper, workers/mtp/host_native.py's
    build)."""
    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specfleet"
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
    except (OSError, RuntimeError):  # RuntimeError: no home directory (a bare container's uid)
        return None
    return root if st.st_uid == os.getuid() and not st.st_mode & 0o022 else None


def wrapper_dir(real: str) -> Path:
    """One directory per (compiler, flags): two installs on one machine never rewrite each
    other's wrapper under a process that runs it. OSError where there is no private cache
    directory for it (`private_cache_dir`)."""
    root = private_cache_dir()
    if root is None:
        raise OSError("no cache directory of this user's alone for the g++ wrapper")
    return root / "jit-cc" / flags_key(real)


def flags_key(real: str) -> str:
    """12 hex digits naming (compiler, flags)."""
    return hashlib.sha1(" ".join([real, *FLAGS]).encode()).hexdigest()[:12]


def mlx_kernel_dir() -> Path:
    """Where MLX keeps the CPU kernels it builds: `std::filesystem::temp_directory_path()`
    (libstdc++ reads TMPDIR, TMP, TEMP, TEMPDIR, else /tmp) / mlx / <version> / cpu."""
    import mlx.core as mx

    tmp = next((os.environ[v] for v in ("TMPDIR", "TMP", "TEMP", "TEMPDIR") if os.environ.get(v)),
               "/tmp")  # fmt: skip
    version = str(mx.__version__)  # type: ignore[attr-defined]  # not in its stubs
    return Path(tmp) / "mlx" / version / "cpu"


def retire_stale_kernels(here: Path, key: str) -> bool:
    """Delete the kernels MLX built before this wrapper (other flags, or none) once: True if
    it did. A stamp in MLX's kernel directory names the flags its kernels were built with; the
    lock (in `here`, the wrapper's private directory) keeps two processes starting together
    from deleting each other's new kernels. Only in a directory of this user's."""
    kernels = mlx_kernel_dir()
    stamp = kernels / f".specfleet-jit-{key}"
    if stamp.exists():
        return False
    with open(here / ".retire.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():  # another process did it while this one waited
            return False
        kernels.mkdir(parents=True, exist_ok=True)
        if kernels.stat().st_uid != os.getuid():
            return False
        for old in kernels.glob(".specfleet-jit-*"):
            old.unlink(missing_ok=True)
        for lib in kernels.glob("lib*.so"):
            lib.unlink(missing_ok=True)
        stamp.touch()
    return True


def without_wrappers(path: str) -> str:
    """`path` less every directory holding one of these wrappers (a child process that must
    build as MLX does: a baseline, a test's control)."""

    return os.pathsep.join(d for d in path.split(os.pathsep) if MARK not in _read(Path(d) / "g++"))


def _read(file: Path) -> str:
    try:
        return file.read_text(errors="replace") if file.is_file() else ""
    except OSError:
        return ""


def install() -> Path | None:
    """Put the `g++` wrapper first on this process's PATH (idempotent); returns its directory,
    or None where it does not apply or cannot be made (then MLX builds as it always does)."""
    path = os.environ.get("PATH", "")
    if not wanted():
        # Off here: a wrapper this process inherited (a parent's PATH) must not build either.
        os.environ["PATH"] = without_wrappers(path)
        return None
    first = path.split(os.pathsep)[0]
    if first and MARK in _read(Path(first) / "g++"):
        return Path(first)  # installed: this process's wrapper is first and still there
    rest = without_wrappers(path)
    real = shutil.which("g++", path=rest)
    if real is None:
        return None  # no compiler: MLX does not compile on the CPU at all
    script = f'#!/bin/sh\n{MARK}\nexec "{real}" {" ".join(FLAGS)} "$@"\n'
    try:
        here = wrapper_dir(real)  # OSError: no private cache directory (no home, shared)
        here.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = here / "g++"
        if _read(target) != script:
            tmp = here / f".g++.{os.getpid()}"
            tmp.write_text(script)
            tmp.chmod(0o755)
            os.replace(tmp, target)  # atomic: a process starting beside this one reads either
    except (OSError, RuntimeError):
        return None
    rest = os.pathsep.join(d for d in rest.split(os.pathsep) if d != str(here))  # if emptied
    os.environ["PATH"] = os.pathsep.join([str(here), rest]) if rest else str(here)
    try:
        retire_stale_kernels(here, flags_key(real))
    except OSError:
        pass  # a kernel directory it cannot clear: old kernels are slower, with the same bits
    return here
