"""Generate the Python gRPC stubs from every .proto under protos/specfleet/.

Run from anywhere: `python protos/generate.py` writes `*_pb2.py`, `*_pb2.pyi` and
`*_pb2_grpc.py` next to each .proto; `python protos/generate.py --check` regenerates into a
temporary directory and exits 1 if any committed stub differs (CI runs this; stubs are never
edited by hand). Protos are compiled with the repository root as include path, so stubs import
each other as `protos.specfleet.v1.<name>_pb2` and the gRPC service names stay `specfleet.v1.*`.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos" / "specfleet"
STUB_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Compile every proto into out_dir (mirroring the repo layout); return the stub paths."""
    from grpc_tools import protoc

    protos = [str(p.relative_to(ROOT)) for p in proto_files()]
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed for {protos}")
    return sorted(p for p in out_dir.rglob("*") if p.name.endswith(STUB_SUFFIXES))


def committed_stubs() -> list[Path]:
    return sorted(p for p in PROTO_DIR.rglob("*") if p.name.endswith(STUB_SUFFIXES))


def check() -> list[str]:
    """Differences between committed stubs and freshly generated ones (empty = in sync)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.relative_to(tmp): p for p in generate(Path(tmp))}
        have = {p.relative_to(ROOT): p for p in committed_stubs()}
        for rel in sorted(set(fresh) | set(have)):
            if rel not in have:
                problems.append(f"{rel}: missing; run `python protos/generate.py`")
            elif rel not in fresh:
                problems.append(f"{rel}: stale stub without a .proto; delete it")
            elif not filecmp.cmp(fresh[rel], have[rel], shallow=False):
                problems.append(f"{rel}: differs from generated; run `python protos/generate.py`")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify committed stubs only")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate(Path(tmp)):
            dest = ROOT / path.relative_to(tmp)
            shutil.copyfile(path, dest)
            print(f"wrote {dest.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
