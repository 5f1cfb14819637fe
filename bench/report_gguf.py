"""RESULTS.md section for bench/gguf_real.py (results/gguf_real_cpu.json)."""

from __future__ import annotations

from typing import Any


def gguf_real_section(d: dict[str, Any]) -> list[str]:
    fmt = ", ".join(f"{n} {k}" for k, n in sorted(d["formats"].items()))
    ppl, tps, mem = d["perplexity"], d["tokens_per_s"], d["memory_mib"]
    agree = d["agreement"]
    lines = [
        f"Checkpoint: `{d['checkpoint']}` ({d['gguf_bytes'] / 2**20:.0f} MiB, "
        f"{d['num_parameters'] / 1e6:.1f}M parameters; tensors: {fmt}), converted by "
        f"`specfleet convert` in {d['convert_s']:.1f} s. Machine: {d['machine']}. "
        "Kept = Q4_1 / Q8_0 as MLX 4/8-bit affine layers (bit-exact), run with fp32 scales and "
        "activations; dequantized = `--dequantize --dtype float32`, the same values as fp32 "
        "matrices (what Engine.load runs on the CPU by default).",
        "",
        "| | kept quantized | dequantized | kept / dequantized |",
        "|---|---|---|---|",
        f"| perplexity ({d['paragraph_tokens']}-token paragraph) | {ppl['kept']:.4f} | "
        f"{ppl['dequantized']:.4f} | {d['perplexity_rel_diff']:.1e} relative (target < 1e-2) |",
    ]
    for b in tps["kept"]:
        lines.append(
            f"| decode tokens/s, {b} (median of {len(d['tokens_per_s_runs']['kept'][b])}) | "
            f"{tps['kept'][b]:.2f} | {tps['dequantized'][b]:.2f} | "
            f"{d['kept_vs_dequantized_speed'][b]:.2f}x |"
        )
    for key, label in (
        ("weight_mib", "weights in memory (MiB)"),
        ("rss_after_load_mib", "resident after load (MiB)"),
        ("peak_rss_after_forward_mib", "peak resident after a forward (MiB)"),
    ):
        k, q = mem["kept"][key], mem["dequantized"][key]
        lines.append(f"| {label} | {k:.0f} | {q:.0f} | {k / q:.2f}x |")
    step = d.get("one_token_forward_s")
    if step:
        lines.append(
            f"| one single-token forward (s) | {step['kept']:.3f} | {step['dequantized']:.3f} | "
            f"{step['kept'] / step['dequantized']:.2f}x |"
        )
        lines += ["", f"The kept model as mlx-lm loads it (fp16 scales and activations) takes "
                  f"{step['kept_fp16']:.2f} s for that forward on this CPU, "
                  f"{step['kept_fp16'] / step['kept']:.0f}x the fp32-scale run: MLX's CPU "
                  "quantized matmul is slow in fp16, not in itself."]  # fmt: skip
    same = sum(a["identical"] for a in agree)
    lines += [
        "",
        f"Greedy chat samples: {same}/{len(agree)} identical token for token (common prefixes "
        f"{[a['common_prefix'] for a in agree]} of {[a['length'] for a in agree]} tokens).",
        "",
    ]
    for q, texts in d["samples"].items():
        lines.append(f"- **{q}** kept: {texts['kept']!r}")
        if texts["dequantized"] != texts["kept"]:
            lines.append(f"  dequantized: {texts['dequantized']!r}")
    return [*lines, ""]
