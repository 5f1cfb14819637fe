"""MLX's CPU kernels built with the CPU's FMA/AVX2 (workers/cpu_jit.py): same bits, other code.

The bit test runs MLX in subprocesses with empty kernel caches (MLX keeps built kernels by name
under $TMPDIR, so a warm cache would hide which command built them): one with the wrapper, one
without, each comparing compiled chains with MLX's uncompiled ops. The wrapper's kernels must
hold FMA instructions (the flags reached g++) and return the bits the uncompiled ops and the
baseline build return (no contraction of a * b + c).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workers import cpu_jit

ROOT = Path(__file__).resolve().parents[3]

PROBE = r"""
import json, sys
import mlx.core as mx, mlx.nn as nn
import numpy as np
from workers import cpu_jit
installed = cpu_jit.install()
x = mx.random.normal((3, 37, 200), key=mx.random.key(0))
y = mx.random.normal((3, 37, 200), key=mx.random.key(1))
# Scales up to 100 and the edges the exponential's checks guard (+-88, NaN, infinities, zeros,
# denormals): a vectorised kernel must give each the scalar one's bits.
x = x * mx.array([0.01, 1.0, 10.0, 100.0])[mx.arange(200) % 4]
edges = mx.array([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 88.0, 88.1, -88.0,
                  -88.1, 87.9, -87.9, 1e-40, -1e-40, 3e38, -3e38])
x = mx.concatenate([edges, x.reshape(-1)[edges.size:]]).reshape(x.shape)
chains = {  # compiled -> the same ops uncompiled
    "silu_gate": (mx.compile(lambda a, b: nn.silu(a) * b), lambda a, b: a * mx.sigmoid(a) * b),
    "mul_add": (mx.compile(lambda a, b: a * b + a), lambda a, b: a * b + a),
    "exp_chain": (mx.compile(lambda a, b: mx.exp(a - b) * 0.5), lambda a, b: mx.exp(a - b) * 0.5),
    "sigmoid": (mx.compile(lambda a, b: mx.sigmoid(a) + b), lambda a, b: mx.sigmoid(a) + b),
}
out = {"installed": installed is not None, "wrapper": str(installed), "bits": {}}
for name, (compiled, ops) in chains.items():
    got, want = np.array(compiled(x, y)), np.array(ops(x, y))
    out["bits"][name] = got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    out.setdefault("nan_out", {})[name] = int(np.isnan(got).sum())
    np.save(sys.argv[1] + "/" + name + ".npy", got)
print(json.dumps(out))
"""


def _probe(tmp: Path, flags_on: bool, path: str | None = None) -> tuple[dict, Path]:
    """The probe in a child with an empty kernel cache, the route on or off. Off, the child's
    install() also drops a wrapper it inherited on PATH (an engine of this test process may
    have put one first, routes.install): the control must build as MLX does."""
    side = tmp / ("on" if flags_on else "off")
    (side / "tmp").mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(side / "tmp"), "XDG_CACHE_HOME": str(side / "cache"),
           "PYTHONPATH": str(ROOT), cpu_jit.ENV: "1" if flags_on else "0"}  # fmt: skip
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(side)], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), side


def _disassembly(side: Path) -> str:
    libs = sorted((side / "tmp").rglob("*.so"))
    assert libs, "MLX built no kernel"
    return subprocess.run(["objdump", "-d", *map(str, libs)], capture_output=True, text=True).stdout


def _fma_instructions(side: Path) -> int:
    return _disassembly(side).count("vfmadd")


def _exp_calls_and_packed_fmas(side: Path) -> tuple[int, int]:
    """Calls into an out-of-line `simd::exp`, and FMAs on 8 floats at once (ymm registers)."""
    text = _disassembly(side)
    calls = len(re.findall(r"call .*simd3exp", text))
    packed = len(re.findall(r"vfmadd\w*ps\s+\S*%ymm", text))
    return calls, packed


@pytest.mark.skipif(not cpu_jit.wanted(), reason="not MLX's CPU backend on an AVX2/FMA x86-64")
def test_kernels_built_with_fma_return_the_uncompiled_bits(tmp_path):
    if not (cpu_jit.shutil.which("g++") and cpu_jit.shutil.which("objdump")):
        pytest.skip("no g++/objdump: MLX does not build CPU kernels here")
    on, on_dir = _probe(tmp_path, flags_on=True)
    # The control inherits the "on" child's wrapper first on PATH, as a child of a process that
    # installed it would: switched off, it must not build through it.
    inherited = os.pathsep.join([on["wrapper"], os.environ.get("PATH", "")])
    off, off_dir = _probe(tmp_path, flags_on=False, path=inherited)
    assert on["installed"] and not off["installed"]
    assert _fma_instructions(on_dir) > 0  # the flags reached the compiler
    assert _fma_instructions(off_dir) == 0  # ... and only through the wrapper
    calls, packed = _exp_calls_and_packed_fmas(on_dir)
    assert calls == 0 and packed > 0  # the exponential inlined, the loops 8 floats wide
    assert _exp_calls_and_packed_fmas(off_dir)[1] == 0  # baseline x86-64: no ymm FMAs
    assert on["nan_out"]["sigmoid"] == 1  # the NaN input's, no other (the edges were there)
    for name in on["bits"]:
        assert on["bits"][name] and off["bits"][name], name  # compiled == uncompiled ops
        a = (on_dir / f"{name}.npy").read_bytes()
        assert a == (off_dir / f"{name}.npy").read_bytes(), name  # == the baseline build


def _fake_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding a do-nothing `g++`, first on PATH (then /usr/bin)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "g++").write_text("#!/bin/sh\n")
    (fake / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(fake), "/usr/bin"]))
    return fake


def test_install_puts_one_wrapper_first_and_keeps_the_path(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_jit, "wanted", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # MLX's kernels: this test's own
    fake = _fake_compiler(tmp_path, monkeypatch)
    first = cpu_jit.install()
    again = cpu_jit.install()
    assert first is not None and first == again
    assert first.parent == tmp_path / "specfleet" / "jit-cc"
    path = os.environ["PATH"].split(os.pathsep)
    assert path == [str(first), str(fake), "/usr/bin"]
    (first / "g++").unlink()  # a cleaned cache: the next engine writes it again
    assert cpu_jit.install() == first and (first / "g++").is_file()
    assert os.environ["PATH"].split(os.pathsep) == path
    script = (first / "g++").read_text()
    assert f'exec "{fake / "g++"}" {" ".join(cpu_jit.FLAGS)} "$@"' in script
    assert "-ffp-contract=off" in cpu_jit.FLAGS


def test_not_installed_off_x86_or_when_opted_out(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", cpu_jit.without_wrappers(os.environ.get("PATH", "")))
    path = os.environ["PATH"]
    monkeypatch.setattr(cpu_jit.platform, "machine", lambda: "arm64")
    assert cpu_jit.install() is None
    monkeypatch.setattr(cpu_jit.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv(cpu_jit.ENV, "0")
    assert cpu_jit.install() is None
    monkeypatch.setattr(cpu_jit, "cpu_features", lambda: frozenset({"avx2"}))  # no fma, f16c
    monkeypatch.delenv(cpu_jit.ENV)
    assert cpu_jit.install() is None
    assert os.environ["PATH"] == path


def test_a_cache_directory_others_can_write_gets_no_wrapper(tmp_path, monkeypatch):
    """The wrapper runs as the engine's compiler: never from a directory others may write."""
    monkeypatch.setattr(cpu_jit, "wanted", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "specfleet").mkdir()
    (tmp_path / "specfleet").chmod(0o777)
    monkeypatch.setenv("PATH", cpu_jit.without_wrappers(os.environ.get("PATH", "")))
    path = os.environ["PATH"]
    assert cpu_jit.private_cache_dir() is None
    assert cpu_jit.install() is None
    assert os.environ["PATH"] == path and not list((tmp_path / "specfleet").iterdir())
    (tmp_path / "specfleet").chmod(0o700)
    assert cpu_jit.private_cache_dir() == tmp_path / "specfleet"


def test_no_home_directory_leaves_mlx_as_it_is(monkeypatch):
    """A container whose uid has no home: the engine still loads, MLX builds as it does."""
    monkeypatch.setattr(cpu_jit, "wanted", lambda: True)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("PATH", cpu_jit.without_wrappers(os.environ.get("PATH", "")))

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(cpu_jit.Path, "home", staticmethod(no_home))
    path = os.environ["PATH"]
    assert cpu_jit.install() is None
    assert os.environ["PATH"] == path


def test_kernels_built_before_the_wrapper_are_retired_once(tmp_path, monkeypatch):
    """MLX reuses a kernel by name whatever built it: install deletes the libraries an earlier
    build left (once per set of flags, stamped), so the next ones are built with its flags."""
    monkeypatch.setattr(cpu_jit, "wanted", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    for var in ("TMP", "TEMP", "TEMPDIR"):
        monkeypatch.delenv(var, raising=False)
    kernels = cpu_jit.mlx_kernel_dir()
    assert kernels.parent.parent == tmp_path / "tmp" / "mlx"
    kernels.mkdir(parents=True)
    (kernels / "libold_contiguous.so").write_text("built without the flags")
    (kernels / "old_contiguous.cpp").write_text("// its source, kept")
    (kernels / ".specfleet-jit-0123456789ab").touch()  # an earlier set of flags' stamp
    fake = _fake_compiler(tmp_path, monkeypatch)
    here = cpu_jit.install()
    assert here is not None
    stamp = kernels / f".specfleet-jit-{cpu_jit.flags_key(str(fake / 'g++'))}"
    assert sorted(p.name for p in kernels.iterdir()) == sorted([stamp.name, "old_contiguous.cpp"])
    (kernels / "libnew_contiguous.so").write_text("built through the wrapper")
    assert not cpu_jit.retire_stale_kernels(here, cpu_jit.flags_key(str(fake / "g++")))
    assert (kernels / "libnew_contiguous.so").exists()  # stamped: kept
