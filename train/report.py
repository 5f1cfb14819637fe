"""Render the Results section of workers/default_model/README.md from eval.json + train_summary.json.

.venv/bin/python -m train.report --model-dir workers/default_model
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def _row(name: str, s: dict[str, Any]) -> str:
    acc = " / ".join(f"{a:.3f}" for a in s["acceptance_per_depth"])
    cond = " / ".join("-" if a is None else f"{a:.3f}" for a in s["conditional_acceptance"])
    tpr = " / ".join(f"{v:.2f}" for v in s["tokens_per_round_at_depth"].values())
    return f"| {name} | {acc} | {cond} | {tpr} |"


def _self_distill(rounds: list[dict[str, Any]]) -> list[str]:
    """A sentence on the head's self-distillation rounds (train/self_distill.py), if any."""
    if not rounds:
        return []
    each = "; ".join(
        f"{r['sequences']} continuations of {r['new_len']} tokens (seed {r['seed']}), "
        f"{r['mtp_steps']} x {r['mtp_batch']} at {r['mtp_lr']} (depths 1-{r['mtp_depth']}, "
        f"{r['share']:.0%} of rows continuations: {r['prompt_len']} corpus tokens, then "
        f"{r['new_len']} generated), {r['generate_s'] + r['train_s']:.0f} s, "
        f"final loss {r['final_loss']:.2f}"
        for r in rounds
    )
    return [
        "",
        f"The MTP head then continued training on the target's own greedy continuations of "
        f"training-corpus windows (`train/self_distill.py`), {len(rounds)} "
        f"round{'s' if len(rounds) > 1 else ''}: {each}.",
    ]


def render(ev: dict[str, Any], summary: dict[str, Any]) -> str:
    tf, gr = ev["teacher_forced_heldout_text"], ev["greedy_self_continuations"]
    wall, loss, c = summary["wall_time_s"], summary["final_loss"], summary["config"]
    head = "| drafter | acceptance at depth 1/2/3/4 | conditional on earlier depths | tokens per round, depth 1/2/3/4 |\n|---|---|---|---|"
    return "\n".join(
        [
            BEGIN,
            "## Results",
            "",
            f"Training wall time on {summary.get('device', 'this 2-core CPU')}: target "
            f"{wall['target_s']:.0f} s, MTP {wall['mtp_s']:.0f} s, draft {wall['draft_s']:.0f} s, "
            f"total {wall['total_s'] / 60:.1f} min. Final train losses (nats/token; MTP and draft "
            f"are cross-entropies against the target's distribution): target {loss['target']:.2f}, "
            f"MTP {loss['mtp']:.2f}, draft {loss['draft']:.2f}; held-out target loss "
            f"{summary.get('heldout_target_loss', float('nan')):.2f}. Steps x batch "
            f"(x {c['seq_len']} tokens), "
            f"peak LR: target {c['target_steps']} x {c['target_batch']}, {c['target_lr']}; MTP "
            f"{c['mtp_steps']} x {c['mtp_batch']}, {c['mtp_lr']} (depths 1-{c['mtp_depth']}); "
            f"draft {c['draft_steps']} x {c['draft_batch']}, {c['draft_lr']}; seed {c['seed']}.",
            *_self_distill(summary.get("mtp_self_distill", [])),
            "",
            f"**Held-out text, teacher-forced** ({tf['tokens']} tokens of the held-out files):",
            f"greedy next-token accuracy target **{tf['target_accuracy']:.3f}**, draft "
            f"{tf['draft_accuracy']:.3f}; draft-model acceptance (draft argmax = target argmax) "
            f"**{tf['draft_acceptance']:.3f}**. MTP at depth d: its argmax for x(t+d+1), chained "
            "on the true tokens, equals the target's argmax given the true prefix.",
            "",
            head,
            _row("MTP head", tf["mtp"]),
            _row("draft model", tf["draft_model"]),
            "",
            f"**Target's own greedy continuations** of the {gr['prompts']} held-out prompts "
            f"({gr['new_tokens_per_prompt']} new tokens each; this is what greedy speculative "
            "decoding sees, since every accepted draft is a target-greedy token). Tokens per round "
            "= accepted drafts + 1 (the bonus token), if the drafter always proposes that many:",
            "",
            head,
            _row("MTP head", gr["mtp"]),
            _row("draft model", gr["draft_model"]),
            "",
            "Real single-row MTP speculative decoding of the same prompts "
            "(`workers/mtp/reference.py`: chained drafts, one verify forward per round, cache "
            "rollback), greedy, outputs identical to plain greedy decoding: "
            + "; ".join(
                f"depth {d}: acceptance {v['acceptance']:.3f}, {v['tokens_per_round']:.2f} "
                f"tokens/round{'' if v['identical_to_plain_greedy'] else ' (NOT identical)'}"
                for d, v in gr.get("mtp_reference_decode", {}).items()
            )
            + ".",
            "",
            f"Eval wall time {ev['eval_wall_s']:.0f} s (`train/eval_default.py`, fp32 on CPU).",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="write the Results section of the default model README")
    p.add_argument("--model-dir", type=Path, default=Path("workers/default_model"))
    a = p.parse_args(argv)
    ev = json.loads((a.model_dir / "eval.json").read_text())
    summary = json.loads((a.model_dir / "train_summary.json").read_text())
    readme = a.model_dir / "README.md"
    text = readme.read_text()
    block = render(ev, summary)
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.replace("RESULTS_PLACEHOLDER", block)
    readme.write_text(text)


if __name__ == "__main__":
    main()
