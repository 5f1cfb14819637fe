"""RESULTS.md sections for bench/peers.py (every system on one Qwen3.5-shape checkpoint) and the
P5 summary over the trained hybrid's GPU runs (bench/peer_trained.py)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

PEER_LABELS = {
    "mlx_lm_batch_generator": "mlx-lm BatchGenerator",
    "mlx_vlm_plain": "mlx-vlm batch, no drafter",
    "mlx_vlm_mtp": "mlx-vlm batched MTP",
    "mlx_vlm_mtp_noclamp": "mlx-vlm batched MTP, clamp off (diagnostic)",
    "specfleet_plain": "specfleet, no drafter",
    "specfleet_mtp": "specfleet MTP",
}


def peer_model_line(m: dict) -> str:
    """What the peers' checkpoint is: bench/peer_model.py's random one or peer_trained.py's."""
    sh = m["shape"]
    what = (f"Qwen3.5-shape hybrid (`{m['preset']}` preset: {m['target_params'] / 1e6:.1f}M "
            f"params, {sh['num_hidden_layers']} layers, every {sh['full_attention_interval']}th "
            f"full attention, the rest GatedDeltaNet; hidden {sh['hidden_size']}, vocab "
            f"{sh['vocab_size']})")  # fmt: skip
    if m.get("trained"):
        t, h = m["target"], m["mtp"]
        return (f"Model: trained {what} (`bench/peer_trained.py`: {m['recipe']['target_steps']} "
                f"steps on the default model's {m['corpus_tokens'] / 1e6:.1f}M-token corpus, "
                f"held-out loss {t['heldout_loss']:.2f}) with a one-layer MTP head distilled for "
                f"{m['recipe']['mtp_steps']} steps (held-out depth-1 agreement "
                f"{h['heldout_depth1_agreement']:.2f}); prompts: the default model's held-out "
                "prompts; loaded by each system's own loader.")  # fmt: skip
    return (f"Model: random {what} with a one-layer MTP head fitted for {m['fit_steps']} steps "
            f"(loss {m['fit_loss']:.2f}); written once in the Hugging Face layout "
            "(`bench/peer_model.py`) and loaded by each system's own loader.")  # fmt: skip


def trained_peer_summary(runs: list[dict], ops: dict | None) -> list[str]:
    """Issue 11's P5 on the trained hybrid, over every peers run of it on the GPU: specfleet MTP
    ÷ specfleet plain, paired within each repeat (the two run back to back), per depth."""
    if not runs:
        return []
    lines = ["## P5 on the trained hybrid (H200): MTP ÷ plain, paired per repeat", "",
             "Each repeat of bench/peers.py runs every system once in turn, so an MTP pass and the "
             "plain pass before it share the card's state; their ratio is steadier than a ratio of "
             "medians (single passes on this card move ±30-50%). Runs: "
             + "; ".join(f"{r['max_tokens']} tokens, depth {r['draft_depth']}, {r['repeats']} "
                         "repeats" for r in runs) + ".", "",
             "| code | depth | tokens | " + " | ".join(f"B={b}" for b in sorted(runs[0]["batch"], key=int))
             + " |", "|---|---|---|" + "---|" * len(runs[0]["batch"])]  # fmt: skip
    groups: dict[tuple[str, int, int], list[dict]] = {}
    for r in runs:  # `label`: the code a run measured, where it is not the first trained runs'
        key = (r.get("label", "a9c822f (last stop's engine)"), r["draft_depth"], r["max_tokens"])
        groups.setdefault(key, []).append(r)
    for (label, depth, tokens), rs in sorted(groups.items()):
        cells = []
        for b in sorted(rs[0]["batch"], key=int):
            pairs = [m / p for r in rs for p, m in zip(
                r["batch"][b]["specfleet_plain"]["tokens_per_s_runs"],
                r["batch"][b]["specfleet_mtp"]["tokens_per_s_runs"], strict=True)]  # fmt: skip
            cells.append(f"{statistics.median(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})")
        lines.append(f"| {label} | {depth} | {tokens} | " + " | ".join(cells) + " |")
    lines.append("")
    if ops:
        rows = ops["rows"]
        lines += ["Graph primitives the device runs per emitted token (`bench/graph_ops.py`, same "
                  f"card and checkpoint, {ops['max_tokens']} tokens, depth {ops['depth']}; a "
                  "compiled function counts once), plain → MTP: " + ", ".join(
                      f"{k.split()[0]} {rows[k]['ops_per_token']:.0f} → "
                      f"{rows[k.replace('plain', 'mtp')]['ops_per_token']:.0f}"
                      for k in rows if k.endswith("plain")) + ".", ""]  # fmt: skip
    return lines


def peers_section(data: dict, stem: str, plot_lines: Callable[..., str]) -> list[str]:
    """bench/peers.py: every system on one Qwen3.5-shape checkpoint, same prompts, greedy.
    `plot_lines` is bench/report.py's line-plot writer (returns the PNG's name)."""
    m, rows = data["model"], data["batch"]
    bs = sorted(rows, key=int)
    names = list(rows[bs[0]])
    vlm = data["mlx_vlm"]
    lines = [peer_model_line(m) + " Machine: " + data["machine"] + f"; MLX {data['mlx']}; "
             f"{len(data['prompt_lengths'])} prompts of {data['prompt_lengths']} tokens, "
             f"{data['max_tokens']} new tokens each, greedy, draft depth {data['draft_depth']} "
             f"for both MTP systems; median of {data['repeats']} interleaved repeats.",
             "",
             (f"mlx-vlm {vlm['version']}, installed with `{vlm['install']}`."
              if vlm["version"] and not vlm["error"] else
              f"mlx-vlm did not run here: `{vlm['error']}` (install: `{vlm['install']}`)."),
             "",
             "Cells: tokens/s (ratio to mlx-lm BatchGenerator in the same run; MTP rows: ratio to "
             "the same system without a drafter, accepted drafts per row per round as the system "
             "itself counts them). Identical = rows token-identical to mlx-lm's single-sequence "
             "greedy decode of the same weights.",
             "",
             "| system | " + " | ".join(f"B={b}" for b in bs) + " | identical |",
             "|---" * (len(bs) + 2) + "|"]  # fmt: skip
    for n in names:
        cells = []
        for b in bs:
            r = rows[b][n]
            cell = f"{r['tokens_per_s']:.0f} ({r['speedup_vs_mlx_lm']:.2f}x"
            if "speedup_vs_own_plain" in r:
                cell += (
                    f"; {r['speedup_vs_own_plain']:.2f}x own, acc {r['accepted_per_row_round']:.2f}"
                )
            cells.append(cell + ")")
        same = [f"{rows[b][n]['identity']['identical_rows']}/{rows[b][n]['identity']['rows']}"
                for b in bs]  # fmt: skip
        lines.append(
            f"| {PEER_LABELS.get(n, n)} | " + " | ".join(cells) + f" | {', '.join(same)} |"
        )
    spread = sorted(
        max(r["tokens_per_s_runs"]) / min(r["tokens_per_s_runs"])
        for b in bs
        for r in rows[b].values()
    )
    for name, err in (data.get("failed") or {}).items():
        lines += ["", f"{PEER_LABELS.get(name, name)} failed and was left out: `{err}`"]
    base_same = [rows[b]["mlx_lm_batch_generator"]["identity"] for b in bs]
    if m.get("dtype") not in (None, "float32") and all(
        i["identical_rows"] < i["rows"] for i in base_same
    ):
        lines += ["", f"Identity in {m['dtype']}: no system reproduces the single-sequence "
                  "reference token for token, mlx-lm's own BatchGenerator included (batched "
                  f"{m['dtype']} matmuls round differently from one-row ones), so the column "
                  "says nothing about speculation here; token identity is checked in float32 "
                  "(the CPU run and the test suite)."]  # fmt: skip
    below = data.get("reference_steps_gap_below")
    if below:
        lines += ["", f"Identity sensitivity: of the reference's {data['reference_steps']} greedy "
                  f"steps, {below['0.01']} have a top-2 logit gap below 0.01 and {below['0.05']} "
                  "below 0.05: token identity would likely catch a system whose logits are off by "
                  "about that much."]  # fmt: skip
    load = data.get("load_average_start_end")
    host = "the lent GPU's host" if "gpu" in data["machine"] else "2 cores, shared"
    lines += ["", f"Noise: max/min tokens/s across the {data['repeats']} repeats of a cell is "
              f"{spread[len(spread) // 2]:.2f} (median cell), {spread[-1]:.2f} (worst)"
              + (f"; 1-minute load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end "
                 f"({host})." if load else ".")]  # fmt: skip
    lo, hi = rows[bs[0]], rows[bs[-1]]
    if {"mlx_vlm_mtp", "specfleet_mtp"} <= set(names):
        acc = "accepted_per_row_round"
        lines += ["", f"Summary: at B={bs[0]} the two MTP systems accept "
                  f"{lo['mlx_vlm_mtp'][acc]:.2f} (mlx-vlm) and {lo['specfleet_mtp'][acc]:.2f} "
                  f"(specfleet) drafts per row per round with the same head; at B={bs[-1]} "
                  f"mlx-vlm accepts {hi['mlx_vlm_mtp'][acc]:.2f} (every row clamped to the "
                  "batch's minimum"
                  + (f"; {hi['mlx_vlm_mtp_noclamp'][acc]:.2f} with the clamp off"
                     if "mlx_vlm_mtp_noclamp" in hi else "")
                  + f") and specfleet {hi['specfleet_mtp'][acc]:.2f}. MTP over the same "
                  f"system's no-drafter batch at B={bs[-1]}: mlx-vlm "
                  f"{hi['mlx_vlm_mtp']['speedup_vs_own_plain']:.2f}x, specfleet "
                  f"{hi['specfleet_mtp']['speedup_vs_own_plain']:.2f}x."]  # fmt: skip
    sf, sp = hi.get("specfleet_mtp", {}), hi.get("specfleet_plain", {})
    if "round_ms_at_full_batch" in sf and "round_ms_at_full_batch" in sp:
        m, d = sf["round_ms_at_full_batch"], sp["round_ms_at_full_batch"]["verify"]
        lines += ["", f"Why MTP does or does not pay here (specfleet, B={bs[-1]}, full-batch "
                  f"rounds): draft {m['draft']:.1f} ms + verify of {data['draft_depth'] + 1} "
                  f"tokens per row {m['verify']:.1f} ms per round, against {d:.1f} ms per "
                  f"no-drafter decode step (verify/decode {m['verify'] / d:.2f}x); a round emits "
                  f"{sf['tokens_per_row_round']:.2f} tokens per row, so it pays roughly when "
                  f"(draft + verify) / decode < {sf['tokens_per_row_round']:.2f} "
                  f"(here {(m['draft'] + m['verify']) / d:.2f})."]  # fmt: skip
    xs = [int(b) for b in bs]
    tps = {PEER_LABELS.get(n, n): [rows[b][n]["tokens_per_s"] for b in bs] for n in names}
    png = plot_lines(xs, tps, "batch size", "tokens/s", "Peers: Qwen3.5-shape model",
                     f"{stem}.png", logx=True)  # fmt: skip
    acc = {PEER_LABELS.get(n, n): [rows[b][n]["accepted_per_row_round"] for b in bs]
           for n in names if "accepted_per_row_round" in rows[bs[0]][n]}  # fmt: skip
    lines += ["", f"![peers tokens/s](results/{png})", ""]
    if acc:
        png = plot_lines(xs, acc, "batch size", "accepted drafts per row per round",
                         "MTP acceptance vs batch size (same head)", f"{stem}_accept.png",
                         logx=True)  # fmt: skip
        lines += [f"![peers acceptance](results/{png})", ""]
    return lines


def p5_pairs_section(runs: list[dict]) -> list[str]:
    """bench/p5_pairs.py runs: MTP ÷ plain in short pairs per label (repeats pooled), and the
    in-process A/B of the per-row gemv route where a run made one."""
    if not runs:
        return []
    lines = ["## P5 in short pairs (bench/p5_pairs.py, H200, trained hybrid)", "",
             "Warm engines, 16 held-out prompts x 96 tokens, depth 3; each MTP pass right after "
             "its plain pass. Median of the pairs' MTP ÷ plain (range), median tokens/s, and how "
             "many MTP rows equal the plain pass's rows (bf16: batched rounding flips near-ties).",
             "", "| run | B | MTP ÷ plain | plain tok/s | MTP tok/s | rows equal |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(re.sub(r"_\d+$", "", r["label"]), []).append(r)  # repeats pooled
    for label, rs in groups.items():
        for b in [k for k in rs[0]["batch"] if k.isdigit()]:
            cells = [r["batch"][b] for r in rs]
            pairs = [x for c in cells for x in c["mtp_over_plain_pairs"]]
            plain = [x for c in cells for x in c["plain_tokens_per_s"]]
            mtp = [x for c in cells for x in c["mtp_tokens_per_s"]]
            lines.append(f"| {label} | {b} | {statistics.median(pairs):.2f} ({min(pairs):.2f}-"
                         f"{max(pairs):.2f}) | {statistics.median(plain):.0f} | "
                         f"{statistics.median(mtp):.0f} | {cells[-1]['mtp_rows_equal_to_plain']} |")  # fmt: skip
    ab = [(r, k) for r in runs for k in r["batch"] if k.endswith("row_linear")]
    if ab:
        lines += ["", "Per-row gemv linears (workers/row_linear.py) off against on, in one process "
                  "(each repeat: plain and MTP passes off, then on), medians:", "",
                  "| run | B | plain on ÷ off | MTP on ÷ off | MTP ÷ plain, off | MTP ÷ plain, on |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for r, k in ab:
            s = r["batch"][k]["summary"]
            lines.append(f"| {r['label']} | {k.split()[0]} | {s['plain_on_over_off']:.2f} | "
                         f"{s['mtp_on_over_off']:.2f} | {s['mtp_over_plain_off']:.2f} | "
                         f"{s['mtp_over_plain_on']:.2f} |")  # fmt: skip
    return lines + [""]
