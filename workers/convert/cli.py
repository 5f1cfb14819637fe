"""`specfleet convert FILE.gguf OUT_DIR`: write an mlx-lm model directory from a GGUF file."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specfleet convert",
        description="Convert a llama / qwen2 / qwen3 GGUF file into an mlx-lm model directory "
        "(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 stay quantized, bit-exact; Q4_K, Q5_K too with "
        "--dtype float32; other formats are dequantized). Serve it with "
        "`specfleet worker --model OUT_DIR`.",
    )
    p.add_argument("gguf", metavar="FILE.gguf", help="the GGUF model file")
    p.add_argument("out_dir", metavar="OUT_DIR", help="new (or empty) output directory")
    p.add_argument(
        "--dtype",
        choices=["float16", "float32"],
        default="float16",
        help="dtype of float and dequantized tensors and of quantization scales (default float16)",
    )
    p.add_argument(
        "--dequantize", action="store_true", help="dequantize every tensor (no quantized layers)"
    )
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    return p


def convert_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from workers.convert.from_gguf import convert_gguf

    try:
        report = convert_gguf(
            args.gguf,
            args.out_dir,
            dtype=args.dtype,
            keep_quantized=not args.dequantize,
            overwrite=args.force,
        )
    except ValueError as e:
        print(f"specfleet convert: {e}", file=sys.stderr)
        return 2
    print(f"wrote {report.out_dir} ({report.model_type}, {report.num_parameters:,} parameters)")
    for fmt, n in sorted(report.formats.items()):
        print(f"  {n:4d} tensors {fmt}")
    return 0
