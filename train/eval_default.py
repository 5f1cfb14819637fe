"""Evaluate the embedded default model on held-out stdlib files; writes eval.json (+ prints it).

Two views, both greedy:
1. Held-out text, teacher-forced: next-token accuracy of target and draft; draft acceptance
   (draft argmax == target argmax at the same position); MTP acceptance per depth d (the chained
   MTP's argmax for x_{t+d+1} == the target's argmax given the true prefix x_0..x_{t+d}).
2. Target's own greedy continuations of the held-out prompts (what speculative greedy decoding
   sees: every accepted draft is a target-greedy token): per-depth acceptance and the mean number
   of tokens emitted per round (accepted drafts + 1) for draft depths 1..4.

    .venv/bin/python -m train.eval_default --model-dir workers/default_model
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx_lm.models.cache import make_prompt_cache
from tokenizers import Tokenizer

from train import corpus
from train.mtp_chain import chain_forward
from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits
from workers.mtp.loader import load_mtp_head
from workers.mtp.qwen35 import MTPHead
from workers.mtp.reference import mtp_greedy_decode

DEPTH = 4


def load_all(model_dir: Path) -> tuple[Any, Any, MTPHead, Any]:
    target, tok = mlx_lm.load(str(model_dir / "target"))[:2]
    draft = mlx_lm.load(str(model_dir / "draft"))[0]
    mtp = load_mtp_head(model_dir / "target")
    for m in (target, draft, mtp):
        m.set_dtype(mx.float32)  # CPU eval in fp32; weights ship as fp16
    return target, draft, mtp, tok


def run_lengths(ok: np.ndarray) -> np.ndarray:
    """[N, D] bool per start and depth -> number of leading accepted depths per start [N]."""
    return np.cumprod(ok, axis=1).sum(axis=1)


def score_windows(
    target: Any, draft: Any, mtp: MTPHead, windows: np.ndarray
) -> dict[str, np.ndarray]:
    """Per-position hit arrays for windows [B, T] (mtp_ok/draft_ok: [B, T - DEPTH, DEPTH])."""
    x = mx.array(windows)  # [B, T]
    T = x.shape[1]
    N = T - DEPTH
    h, logits = target_hidden_and_logits(target, x)
    t_arg = mx.argmax(logits, axis=-1)  # [B, T]: target greedy for x_{t+1}
    d_arg = mx.argmax(draft(x), axis=-1)
    outs = chain_forward(mtp, h[:, :N], embed(target, x[:, 1 : N + DEPTH]), DEPTH)
    m_ok = [
        mx.argmax(lm_head(target, o), axis=-1) == t_arg[:, d : d + N] for d, o in enumerate(outs, 1)
    ]
    res = {
        "target_correct": np.array(t_arg[:, :-1] == x[:, 1:]),
        "draft_correct": np.array(d_arg[:, :-1] == x[:, 1:]),
        "draft_agree": np.array(d_arg == t_arg),
        "mtp_ok": np.stack([np.array(m) for m in m_ok], axis=-1),  # [B, N, D]
    }
    # Draft-model chained acceptance on the same positions: drafting d tokens after t needs
    # agreement at t+1..t+d (inputs are target-greedy tokens when the text is self-generated).
    agree = res["draft_agree"]
    res["draft_ok"] = np.stack([agree[:, d : d + N] for d in range(1, DEPTH + 1)], axis=-1)
    return res


def greedy_continuations(target: Any, prompts: list[list[int]], n_new: int) -> list[list[int]]:
    out = []
    for p in prompts:
        cache = make_prompt_cache(target)
        logits = target(mx.array([p]), cache=cache)
        seq = list(p)
        for _ in range(n_new):
            nxt = int(mx.argmax(logits[0, -1]).item())  # type: ignore[arg-type]
            seq.append(nxt)
            logits = target(mx.array([[nxt]]), cache=cache)
        out.append(seq)
    return out


def summarize_depths(ok: np.ndarray) -> dict[str, Any]:
    """ok [M, D]: marginal acceptance per depth, conditional, and mean tokens/round per depth."""
    runs = run_lengths(ok)
    return {
        "acceptance_per_depth": [round(float(ok[:, d].mean()), 4) for d in range(ok.shape[1])],
        "conditional_acceptance": [
            round(float(ok[runs >= d, d].mean()), 4) if (runs >= d).any() else None
            for d in range(ok.shape[1])
        ],
        "tokens_per_round_at_depth": {
            str(k): round(float(1 + np.minimum(runs, k).mean()), 4) for k in range(1, DEPTH + 1)
        },
        "positions": int(ok.shape[0]),
    }


def evaluate(model_dir: Path, seq_len: int, max_windows: int, n_prompts: int) -> dict[str, Any]:
    t0 = time.time()
    target, draft, mtp, tok = load_all(model_dir)
    _, heldout = corpus.split(corpus.list_sources())
    bpe = Tokenizer.from_file(str(model_dir / "target" / "tokenizer.json"))
    eos = bpe.token_to_id(corpus.EOS)
    assert eos is not None, "tokenizer.json lacks the EOS token"
    stream = corpus.encode_stream(bpe, heldout, eos_id=eos)
    windows = corpus.eval_windows(stream, seq_len, max_windows)
    parts = [
        score_windows(target, draft, mtp, windows[i : i + 8]) for i in range(0, len(windows), 8)
    ]
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    text = {
        "tokens": int(cat["target_correct"].size),
        "target_accuracy": round(float(cat["target_correct"].mean()), 4),
        "draft_accuracy": round(float(cat["draft_correct"].mean()), 4),
        "draft_acceptance": round(float(cat["draft_agree"].mean()), 4),
        "mtp": summarize_depths(cat["mtp_ok"].reshape(-1, DEPTH)),
        "draft_model": summarize_depths(cat["draft_ok"].reshape(-1, DEPTH)),
    }
    rows = [
        json.loads(line) for line in (model_dir / "heldout_prompts.jsonl").read_text().splitlines()
    ]
    prompts = [tok.encode(r["body"]["prompt"]) for r in rows[:n_prompts]]
    n_new = 64
    seqs = greedy_continuations(target, prompts, n_new)
    mtp_ok, draft_ok = [], []
    for p, s in zip(prompts, seqs, strict=True):
        r = score_windows(target, draft, mtp, np.array([s]))
        # After prefill the target emits x_P; the first round's chain starts at h_{P-1} paired
        # with x_P, so starts t >= P-1 only ever compare generated (target-greedy) tokens.
        start = len(p) - 1
        mtp_ok.append(r["mtp_ok"][0, start:])
        draft_ok.append(r["draft_ok"][0, start:])
    greedy = {
        "prompts": len(prompts),
        "new_tokens_per_prompt": n_new,
        "mtp": summarize_depths(np.concatenate(mtp_ok)),
        "draft_model": summarize_depths(np.concatenate(draft_ok)),
    }
    decode = {}
    for depth in range(1, DEPTH + 1):  # real single-row MTP speculative decoding, same prompts
        acc = drafted = rounds = 0
        lossless = True
        for p, s in zip(prompts, seqs, strict=True):
            out, st = mtp_greedy_decode(target, mtp, p, n_new, depth)
            lossless &= out == s[len(p) :]
            acc, drafted, rounds = acc + st.accepted, drafted + st.drafted, rounds + st.rounds
        decode[str(depth)] = {
            "acceptance": round(acc / drafted, 4),
            "tokens_per_round": round((acc + rounds) / rounds, 4),
            "identical_to_plain_greedy": lossless,
        }
    greedy["mtp_reference_decode"] = decode
    return {
        "python_version": corpus.python_version(),
        "heldout_files": len(heldout),
        "teacher_forced_heldout_text": text,
        "greedy_self_continuations": greedy,
        "eval_wall_s": round(time.time() - t0, 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="evaluate the embedded default model")
    p.add_argument("--model-dir", type=Path, default=Path("workers/default_model"))
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--max-windows", type=int, default=48)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--out", type=Path, default=None, help="default: MODEL_DIR/eval.json")
    a = p.parse_args(argv)
    result = evaluate(a.model_dir, a.seq_len, a.max_windows, a.prompts)
    (a.out or a.model_dir / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
