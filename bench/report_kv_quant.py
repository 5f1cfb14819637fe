"""RESULTS.md section for bench/kv_quant.py (results/kv_quant_cpu.json)."""

from __future__ import annotations

from typing import Any


def kv_quant_section(d: dict[str, Any]) -> list[str]:
    mem, adm, speed, agree = d["memory"], d["admission"], d["speed"], d["agreement"]
    g, ctx = mem["group_size"], mem["context"]
    lines = [
        f"Model: {d['model']}. Machine: {d['machine']}. kv_bits quantizes each cached key and "
        f"value of one head on its own (mx.quantize along the head dim, groups of {g} numbers "
        "unless noted), so speculative output equals plain output at the same kv_bits "
        "(workers/kv_quant.py; tests/workers/engine/test_kv_quant_parity.py).",
        "",
        f"**Memory.** Bytes per token (all layers, keys + values) and what a "
        f"{mem['budget_gib']:g} GiB KV budget holds; rows at the model's context of {ctx}. "
        "The fp32 row is measured from the cache's arrays "
        f"({mem['measured_bytes_per_token']}); the others are the same arithmetic.",
        "",
        "| model | kv_bits | bytes/token | tokens in budget | rows x "
        f"{ctx} | context x 8 rows | tokens vs unquantized |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows in mem["models"].items():
        for key, r in rows.items():
            lines.append(
                f"| {name} | {key} | {r['bytes_per_token']:,.0f} | {r['tokens_in_budget']:,} | "
                f"{r['rows_at_context']:,} | {r['context_at_8_rows']:,} | "
                f"{r['tokens_vs_unquantized']:.2f}x |"
            )
    by = adm["by_bits"]
    lines += [
        "",
        f"**Admission.** {adm['requests']} requests through one engine with kv_budget_tokens = "
        f"{adm['kv_budget_tokens_unquantized']} (memory of that many unquantized tokens): "
        + "; ".join(
            f"kv_bits {k}: {v['kv_budget_tokens']} tokens admitted, {v['most_rows_at_once']} rows "
            "at once"
            for k, v in by.items()
        )
        + ".",
        "",
        f"**Decode speed** (no drafter, {speed['max_tokens']} tokens a row after the first "
        f"round, median of {speed['reps']} interleaved runs; tokens per CPU-second of this "
        "process as well, since other jobs share the cores):",
        "",
        "| B | kv_bits | tokens/s (wall) | vs unquantized | tokens per CPU-s | vs unquantized |",
        "|---|---|---|---|---|---|",
    ]
    for B, rows in speed["median"].items():
        for key, r in rows.items():
            lines.append(
                f"| {B} | {key} | {r['wall']:.1f} | {r['wall_vs_unquantized']:.2f}x | "
                f"{r['cpu']:.1f} | {r['cpu_vs_unquantized']:.2f}x |"
            )
    lines += [
        "",
        "On MLX's CPU backend quantize/dequantize work is slow: `mx.dequantize` takes ~10x a "
        "cast of the same array and `quantized_matmul` attention ~5x fp32 attention, so on the "
        "CPU the cache decodes its slots with a cast, a multiply and an add before mlx-lm's "
        "fused attention. That decode is a pass over the whole cache per layer per round, the "
        "cost in the table; GPUs read the packed slots with quantized matmuls instead "
        "(not measured here).",
        "",
        f"**Greedy agreement** with the unquantized cache over the {agree['prompts']} held-out "
        "prompts (each at its own max_tokens), and MTP-speculative == plain at the same "
        "kv_bits:",
        "",
        "| kv_bits | identical outputs | tokens before the first difference | "
        "MTP speculative == plain |",
        "|---|---|---|---|",
    ]
    for key, r in agree["by_bits"].items():
        spec = (
            f"{r['mtp_speculative_equals_plain']}/{r['mtp_prompts']} "
            f"(acceptance {r['mtp_acceptance']:.2f})"
            if "mtp_prompts" in r
            else "-"
        )
        same = f"{r['identical']}/{agree['prompts']}"
        lines.append(f"| {key} | {same} | {r['token_agreement']:.1%} | {spec} |")
    return [*lines, ""]
