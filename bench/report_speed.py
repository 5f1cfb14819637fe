"""RESULTS.md section for issue 11's speed targets (P1-P5) from the engine and GPU JSON.

P1 plain ÷ BatchGenerator, P2 efficiency with a zero-cost always-right drafter (speedup over
BatchGenerator ÷ tokens per round), P3 MTP speedups, P4 a drafter that does not pay, P5 the
hybrid peer model. Every ratio was measured in one process, side by side.
"""

from __future__ import annotations

from typing import Any


def _ratio(row: dict, name: str, base: str = "mlx_lm_batch_generator") -> str:
    if name not in row or base not in row:
        return "–"
    return f"{row[name]['tokens_per_s'] / row[base]['tokens_per_s']:.2f}"


def engine_ratios(data: dict, label: str) -> list[str]:
    """P1/P3/P4 rows from a bench/engine.py JSON (greedy)."""
    rows = data.get("batch", {}).get("T=0.0", {})
    if not rows:
        return []
    out = [
        f"**{label}** ({data.get('model')}, {data.get('machine')}):",
        "",
        "| B | plain ÷ BG | plain ÷ plain one-round-at-a-time | MTP ÷ BG | MTP ÷ plain | "
        "4-bit draft fixed ÷ plain | 4-bit draft adaptive ÷ plain (learned / cold) |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in sorted(rows, key=int):
        r = rows[b]
        slow = (
            f"{_ratio(r, 'specfleet_slow_draft_adaptive', 'specfleet_plain')} / "
            f"{_ratio(r, 'specfleet_slow_draft_adaptive_cold', 'specfleet_plain')}"
        )
        out.append(
            f"| {b} | {_ratio(r, 'specfleet_plain')} | "
            f"{_ratio(r, 'specfleet_plain', 'specfleet_plain_sync')} | "
            f"{_ratio(r, 'specfleet_mtp')} | {_ratio(r, 'specfleet_mtp', 'specfleet_plain')} | "
            f"{_ratio(r, 'specfleet_slow_draft_fixed', 'specfleet_plain')} | {slow} |"
        )
    return out + [""]


def gpu_section(gpu: dict, plot: Any, run: int = 1) -> list[str]:
    """P1 and P2 on the random Qwen3 presets (bench/gpu.py), with the efficiency plot."""
    out = [
        f"**Random Qwen3 shapes on the GPU, run {run}** ({gpu['device']}, NVIDIA H200; bf16; "
        f"{gpu['max_tokens']} new tokens; forced drafter depth {gpu['draft_depth']}; medians of "
        f"{next(iter(gpu['models'].values()))['rows']['1'].get('repeats', 1)} timed passes):",
        "",
        "| model | B | plain ÷ BG | plain pipelined ÷ one round at a time | forced ÷ BG | "
        "tokens/round | efficiency | verify(K+1) ÷ decode time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    series: dict[str, list[float]] = {}
    bs: list[int] = []
    for preset, entry in gpu["models"].items():
        rows = entry["rows"]
        bs = sorted(int(b) for b in rows)
        series[f"{preset} efficiency"] = [rows[str(b)]["efficiency"] for b in bs]
        for b in bs:
            r = rows[str(b)]
            out.append(
                f"| {entry['model']} | {b} | {r['plain_over_batch_generator']:.2f} | "
                f"{r['engine_plain_tokens_per_s'] / r['engine_plain_sync_tokens_per_s']:.2f} | "
                f"{r['forced_over_batch_generator']:.2f} | {r['tokens_per_round']:.2f} | "
                f"{r['efficiency']:.2f} | {r['verify_over_decode_time']:.2f} |"
            )
    png = plot(bs, series, "batch size", "efficiency (speedup ÷ tokens per round)",
               f"H200: forced-acceptance efficiency (run {run})",
               "gpu_efficiency.png" if run == 1 else f"gpu_efficiency_{run}.png", logx=True)  # fmt: skip
    return out + ["", f"![efficiency](results/{png})", ""]


def lone_row_section(results: list[dict]) -> list[str]:
    """A lone row's unmasked decode step against the masked one (bench/lone_row_step.py)."""
    if not results:
        return []
    out = [
        "**A lone row's decode step, unmasked vs masked** (`python -m bench.lone_row_step`; plain "
        "B=1, 4 random prompts, 64 new tokens; `old` = the same engine with "
        "`BatchCache.reads_exact_row` off; medians over passes, configurations taking turns):",
        "",
        "| device | model | plain ÷ BG, old | plain ÷ BG, new | new ÷ old | passes |",
        "|---|---|---|---|---|---|",
    ]
    for res in results:
        for row in res["presets"].values():
            card = "NVIDIA H200, MLX CUDA" if "gpu" in res["device"] else "2-core x86 CPU"
            out.append(
                f"| {card} | {row['model']} | {row['old_over_batch_generator']:.2f} | "
                f"{row['new_over_batch_generator']:.2f} | {row['new_over_old']:.2f} | "
                f"{res['repeats']} |"
            )
    return out + [""]


def ragged_window_section(res: dict | None) -> list[str]:
    """Verify windows through the kernel against one-token routing only (ragged_window_ab)."""
    if not res:
        return []
    out = [
        "Speculative decoding with windows of up to 8 tokens over at most "
        f"{res['wide_max_slots']} slots also routed to the kernel, against one-token steps only "
        "(`python -m bench.ragged_window_ab`, H200, same process, medians of 3 passes):",
        "",
        "| configuration | windows routed ÷ one-token only | ÷ BG, windows routed | ÷ BG, one-token only |",
        "|---|---|---|---|",
    ]
    for key, row in res["rows"].items():
        out.append(
            f"| {key} | {row['wide_over_one_token']:.2f} | {row['wide_over_bg']:.2f} | "
            f"{row['one_token_over_bg']:.2f} |"
        )
    return out + [""]


def ragged_attention_section(res: dict | None, engine: dict | None = None) -> list[str]:
    """The CUDA ragged attention kernel against MLX's masked attention (bench/ragged_attention),
    and plain decoding with the route on and off (bench/ragged_route.py)."""
    if not res:
        return []
    hq, hk, d = res["heads"]
    out = [
        f"**One-token steps attend by row length on MLX CUDA** (`python -m bench.ragged_attention`, "
        f"NVIDIA H200, bf16, {hq} query heads, {hk} KV heads, head dim {d}; us per call; the "
        "engine routes only W=1 steps to the kernel, `workers/attention_cuda.py`):",
        "",
        "| context | B | W | MLX masked | kernel | max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in res["rows"].items():
        ctx, b, w = (part.split("=")[1] for part in key.split())
        out.append(
            f"| {ctx} | {b} | {w} | {row['masked_us']:.1f} | {row['kernel_us']:.1f} | "
            f"{row['max_abs_diff']:.4f} |"
        )
    if engine:
        out += [
            "",
            "Plain decoding with the route on (kernel) and off (mask), same process, medians "
            "(`bench/ragged_route.py`, H200, 64 new tokens):",
            "",
            "| model | B | kernel ÷ mask | plain ÷ BG, mask | plain ÷ BG, kernel | layers routed |",
            "|---|---|---|---|---|---|",
        ]
        for preset, rows in engine.items():
            for b in ("8", "32"):
                r, lg = rows[f"B{b}"], rows[f"B{b}_logits"]
                out.append(
                    f"| {preset} | {b} | {r['kernel_over_mask']:.2f} | {r['mask_over_bg']:.2f} | "
                    f"{r['kernel_over_bg']:.2f} | {lg['routed_calls']} |"
                )
    return out + [""]


def skinny_matmul_section(results: list[dict]) -> list[str]:
    """The skinny-M matmul kernel experiments against MLX's matmul (bench/skinny_matmul.py):
    the CUDA-core kernel ('RxNW' variants) and the tensor-core one ('tcS')."""
    out: list[str] = []
    for res in results:
        calls = res.get("per_call", [])
        kinds = sorted({k[:-3] for r in calls for k in r if k.endswith("_us") and k != "mlx_us"})
        out += [
            f"**A skinny-M matmul kernel, tried and not used** (`python -m bench.skinny_matmul`, "
            f"variants {', '.join(kinds)}; NVIDIA H200, bf16, weights streamed from memory; us "
            "per call, MLX against the best variant; `row 0 alone` is whether row 0 of an M-row "
            "call equals the 1-row call bit for bit):",
            "",
            "| preset | weight | N x K | M | MLX | best variant | row 0 alone |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in calls:
            best = min(kinds, key=lambda k: r[k + "_us"])
            alone = r.get("row0_bitwise", all(r.get(k + "_row0_bitwise", False) for k in kinds))
            out.append(
                f"| {r['preset']} | {r['weight']} | {r['N']} x {r['K']} | {r['M']} | "
                f"{r['mlx_us']:.1f} | {r[best + '_us']:.1f} ({best}) | {alone} |"
            )
        out += ["", f"Whole forwards through the ragged cache, route to {res.get('route', '4x4')} "
                "on against off (ms, medians of 3 interleaved passes):", "",
                "| preset | B | W | route on | route off | off ÷ on |", "|---|---|---|---|---|---|"]  # fmt: skip
        for r in res.get("forwards", []):
            out.append(
                f"| {r['preset']} | {r['B']} | {r['W']} | {r['on_ms']:.2f} | {r['off_ms']:.2f} | "
                f"{r['off_over_on']:.2f} |"
            )
        out.append("")
    return out


def matmul_forms_section(res: dict | None) -> list[str]:
    """Which form of a skinny matmul MLX CUDA runs fastest (bench/matmul_forms.py)."""
    if not res:
        return []
    forms = [k for k in res["rows"][0] if k not in ("preset", "weight", "N", "K", "M")]
    out = [
        "**Forms of a skinny matmul on MLX CUDA** (`python -m bench.matmul_forms`, NVIDIA H200, "
        "bf16, weights streamed from memory; us per call):",
        "",
        "| preset | weight | M | " + " | ".join(f"`{f}`" for f in forms) + " |",
        "|---|---|---|" + "---|" * len(forms),
    ]
    for r in res["rows"]:
        out.append(
            f"| {r['preset']} | {r['weight']} | {r['M']} | "
            + " | ".join(f"{r[f]:.1f}" for f in forms)
            + " |"
        )
    out += ["", "6.6B forward at B=1 with every 2-8-row linear in each form (ms, medians of 3):",
            "", "| form, window | ms |", "|---|---|"]  # fmt: skip
    out += [f"| {r['cell']} | {r['ms']:.2f} |" for r in res.get("forwards", [])]
    return out + [""]


def speed_section(
    engine_cpu: dict | None,
    engine_real: dict | None,
    engine_gpu: dict | None,
    gpu: list[dict] | None,
    plot: Any,
    lone_row: list[dict] | None = None,
    ragged: dict | None = None,
    ragged_engine: dict | None = None,
    ragged_window: dict | None = None,
    skinny: list[dict] | None = None,
    forms: dict | None = None,
) -> list[str]:
    out = ["## Speed (issue 11): pipelined rounds", ""]
    if engine_cpu:
        out += engine_ratios(engine_cpu, "Embedded default model, CPU")
    if engine_real:
        out += engine_ratios(engine_real, "A real trained checkpoint, CPU")
    if engine_gpu:
        out += engine_ratios(engine_gpu, "Embedded default model, GPU")
    for run, one in enumerate(gpu or [], start=1):
        out += gpu_section(one, plot, run)
    out += lone_row_section(lone_row or []) + ragged_attention_section(ragged, ragged_engine)
    return (
        out
        + ragged_window_section(ragged_window)
        + skinny_matmul_section(skinny or [])
        + matmul_forms_section(forms)
    )
