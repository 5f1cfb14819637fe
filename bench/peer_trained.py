"""Train the Qwen3.5-shape peer on the project's corpus: a hybrid target that is a real language
model, with an MTP head trained on it, for bench/peers.py (issue 11's P5).

    python -m bench.peer_trained --corpus corpus.npz --out DIR [--preset cpu]
        [--target-steps 3000] [--mtp-steps 2000] [--batch 32] [--seq-len 256]

The random peer of bench/peer_model.py accepts about 1.2 of 3 drafts with a head fitted for
minutes to a random target; no published Qwen3.5 checkpoint is reachable here. This one is the
embedded default model's recipe on the hybrid shape: the same corpus (the Python stdlib, exported
with `train_default --export-corpus`) and tokenizer, AdamW with warmup and cosine decay
(train_default.fit), then the head distilled from the frozen target's next-token distributions.
The head is trained at depth 1 only, as published Qwen3.5 heads are (one MTP layer; deeper drafts
chain it), and reads the post-norm hidden, so mlx-vlm and specfleet run it alike.

DIR gets bench/peer_model.py's Hugging Face layout (model + mtp.* shards, config.json), the
default model's tokenizer files, and peer_model.json (shape, losses, held-out acceptance).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from bench.peer_model import PRESETS, Qwen35Shape, save_checkpoint
from train import corpus
from train.train_default import Corpus, fit, soft_ce
from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits
from workers.mtp.qwen35 import MTPArgs, MTPHead

ROOT = Path(__file__).resolve().parents[1]


def unit_lower_inverse(m: mx.array) -> mx.array:
    """Inverse of unit lower-triangular matrices [..., C, C] (C a power of two), by blocks.

    Pairs of diagonal blocks merge log2(C) times: inv([[X, 0], [L, Y]]) = [[X^-1, 0],
    [-Y^-1 L X^-1, Y^-1]]. The Neumann series sum (-A)^n is exact too, but its terms grow
    without bound when keys are correlated and beta is near 1 (1e16 at C=64 in a test).
    """
    C = m.shape[-1]
    if C & (C - 1):
        raise ValueError(f"chunk={C} must be a power of two")
    lead = m.shape[:-2]

    def diagonal_blocks(size: int) -> mx.array:  # [..., C, C] -> [..., C // size, size, size]
        r = m.reshape(*lead, C // size, size, C // size, size)
        return mx.moveaxis(mx.diagonal(r, axis1=-4, axis2=-2), -1, -3)

    inv = mx.ones((*lead, C, 1, 1), dtype=m.dtype)  # inverses of the 1x1 diagonal blocks
    size = 1
    while size < C:
        pairs = inv.reshape(*lead, C // (2 * size), 2, size, size)
        x, y = pairs[..., 0, :, :], pairs[..., 1, :, :]
        below = diagonal_blocks(2 * size)[..., size:, :size]
        top = mx.concatenate([x, mx.zeros_like(x)], axis=-1)
        bottom = mx.concatenate([-(y @ below @ x), y], axis=-1)
        inv = mx.concatenate([top, bottom], axis=-2)
        size *= 2
    return inv[..., 0, :, :]


def chunked_gated_delta(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    a: mx.array,
    b: mx.array,
    A_log: mx.array,
    dt_bias: mx.array,
    state: mx.array | None = None,
    mask: mx.array | None = None,
    chunk: int = 64,
    **_: Any,
) -> tuple[mx.array, mx.array]:
    """mlx-lm's `gated_delta_update` for training, in chunks of `chunk` positions.

    Off Metal mlx-lm runs the recurrence as a Python loop over positions: a training graph of
    ~10 ops per position per layer, slow to compile and to run. This is the chunkwise form of the
    gated delta rule (Yang et al., Gated Delta Networks, 2024), exact up to rounding: inside a
    chunk, with c = cumsum(log g) and S0 the state entering it,
        delta = (I + A)^-1 diag(beta) (V - diag(e^c) K S0^T),  A[j,m] = beta_j e^(c_j-c_m) k_j.k_m
    for m < j; y_i = e^(c_i) S0 q_i + sum_{j<=i} e^(c_i-c_j) (q_i.k_j) delta_j; and the state
    leaving it e^(c_C) S0 + sum_j e^(c_C-c_j) delta_j k_j^T. Only differences of c are
    exponentiated (no division by a decay that underflowed).
    Shapes as mlx-lm: q, k [B, T, Hk, Dk] (normalised), v [B, T, Hv, Dv], a, b [B, T, Hv];
    returns y [B, T, Hv, Dv] and the final state [B, Hv, Dv, Dk] float32.
    """
    if mask is not None:
        raise ValueError("chunked_gated_delta trains on whole sequences: mask must be None")
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[-2:]
    if Hv > Hk:
        q, k = mx.repeat(q, Hv // Hk, -2), mx.repeat(k, Hv // Hk, -2)
    f32 = mx.float32
    beta = mx.sigmoid(b.astype(f32))
    log_g = -mx.exp(A_log.astype(f32)) * nn.softplus((a + dt_bias).astype(f32))  # [B, T, Hv]
    n = -(-T // chunk)
    pad = n * chunk - T  # padded positions: beta 0, g 1, so the state passes through unchanged

    def blocks(x: mx.array) -> mx.array:  # [B, T, Hv, ...] -> [B, Hv, n, chunk, ...] float32
        x = mx.pad(x.astype(f32), [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        x = x.reshape(B, n, chunk, *x.shape[2:])
        return x.transpose(0, 3, 1, 2, 4) if x.ndim == 5 else x.transpose(0, 3, 1, 2)

    qc, kc, vc, bc, c = blocks(q), blocks(k), blocks(v), blocks(beta), blocks(log_g)
    c = mx.cumsum(c, axis=-1)  # [B, Hv, n, C]
    incl = mx.tril(mx.ones((chunk, chunk), dtype=mx.bool_))
    strict = mx.tril(mx.ones((chunk, chunk), dtype=mx.bool_), -1)
    decay = mx.where(incl, mx.exp(mx.where(incl, c[..., :, None] - c[..., None, :], 0)), 0)
    kT = kc.swapaxes(-1, -2)
    neg_a = mx.where(strict, -bc[..., :, None] * decay * (kc @ kT), 0)  # -A [.., C, C]
    inv = unit_lower_inverse(mx.eye(chunk, dtype=f32) - neg_a)
    tb = inv * bc[..., None, :]  # (I + A)^-1 diag(beta)
    w = tb @ (mx.exp(c)[..., None] * kc)  # [B, Hv, n, C, Dk]
    u = tb @ vc  # [B, Hv, n, C, Dv]
    qk = decay * (qc @ kT)
    tail = mx.exp(c[..., -1:] - c)[..., None] * kc  # e^(c_C - c_j) k_j
    s = mx.zeros((B, Hv, Dv, Dk), dtype=f32) if state is None else state.astype(f32)
    ys = []
    for i in range(n):
        delta = u[:, :, i] - w[:, :, i] @ s.swapaxes(-1, -2)  # [B, Hv, C, Dv]
        ci = c[:, :, i]
        ys.append(mx.exp(ci)[..., None] * (qc[:, :, i] @ s.swapaxes(-1, -2)) + qk[:, :, i] @ delta)
        s = mx.exp(ci[..., -1])[..., None, None] * s + delta.swapaxes(-1, -2) @ tail[:, :, i]
    y = mx.stack(ys, axis=2).reshape(B, Hv, n * chunk, Dv)[:, :, :T].transpose(0, 2, 1, 3)
    return y.astype(q.dtype), s


@contextmanager
def chunked_recurrence() -> Iterator[None]:
    """mlx-lm's qwen3_5 layers use chunked_gated_delta inside the block (training only: the
    checkpoint is then measured with each system's own inference path)."""
    from mlx_lm.models import qwen3_5

    saved = qwen3_5.gated_delta_update
    qwen3_5.gated_delta_update = chunked_gated_delta
    try:
        yield
    finally:
        qwen3_5.gated_delta_update = saved


def build_hybrid(shape: Qwen35Shape, seed: int) -> Any:
    """A freshly initialised mlx-lm qwen3_5 model (nn.Linear / nn.Embedding defaults)."""
    from mlx_lm.models import qwen3_5

    mx.random.seed(seed)
    config = {"model_type": "qwen3_5", "text_config": shape.text_config()}
    model = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    return model


def train_target(model: Any, data: Corpus, args: argparse.Namespace, log: Any) -> dict:
    def lm_loss(batch: mx.array) -> mx.array:
        return nn.losses.cross_entropy(model(batch[:, :-1]), batch[:, 1:]).mean()

    held = corpus.eval_windows(data.heldout, args.seq_len, 32)

    def heldout_loss() -> float:
        return float(np.mean([lm_loss(mx.array(held[i : i + 8])).item() for i in range(0, 32, 8)]))

    t0 = time.time()
    batches = corpus.batches(data.train, args.batch, args.seq_len, args.seed + 1)
    losses = fit("target", model, lm_loss, batches, args.target_steps, args.lr, log, 0.1)
    return {
        "final_loss": float(np.mean(losses[-25:])),
        "heldout_loss": heldout_loss(),
        "seconds": time.time() - t0,
    }


def head_loss(target: Any, head: MTPHead, batch: mx.array) -> tuple[mx.array, mx.array]:
    """(soft cross-entropy against the target's distributions, depth-1 agreement) on [B, T+1].

    Row t pairs h_t with embed(x_{t+1}) and predicts x_{t+2}: its teacher is the target's
    distribution at position t+1.
    """
    x = batch[:, :-1]
    h, logits = target_hidden_and_logits(target, x, post_norm=head.args.post_norm)
    h, probs = mx.stop_gradient(h), mx.stop_gradient(mx.softmax(logits, axis=-1))
    out = lm_head(target, head(h[:, :-1], mx.stop_gradient(embed(target, x[:, 1:])), "causal"))
    agree = (mx.argmax(out, -1) == mx.argmax(probs[:, 1:], -1)).mean()
    return soft_ce(out, probs[:, 1:]), agree


def train_head(target: Any, data: Corpus, args: argparse.Namespace, log: Any) -> tuple:
    cfg = {**vars(target.language_model.args), "model_type": "qwen3_5"}
    cfg["mtp_num_hidden_layers"] = 1
    mx.random.seed(args.seed + 2)
    head = MTPHead(MTPArgs.from_target_config(cfg))
    mx.eval(head.parameters())
    target.freeze()
    t0 = time.time()
    batches = corpus.batches(data.train, args.batch, args.seq_len, args.seed + 2)
    losses = fit(
        "mtp", head, lambda b: head_loss(target, head, b)[0], batches, args.mtp_steps,
        args.mtp_lr, log, 0.1,
    )  # fmt: skip
    held = corpus.eval_windows(data.heldout, args.seq_len, 32)
    agree = [head_loss(target, head, mx.array(held[i : i + 8]))[1].item() for i in range(0, 32, 8)]
    return head, {
        "final_loss": float(np.mean(losses[-25:])),
        "heldout_depth1_agreement": float(np.mean(agree)),
        "seconds": time.time() - t0,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True, help="train_default --export-corpus")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer-dir", type=Path, default=ROOT / "workers/default_model/target")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--vocab-size", type=int, default=2048, help="the tokenizer's vocabulary")
    ap.add_argument("--target-steps", type=int, default=3000)
    ap.add_argument("--mtp-steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--mtp-lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    shape = Qwen35Shape(**{**asdict(PRESETS[args.preset]), "vocab_size": args.vocab_size})
    data = Corpus.load(args.corpus)
    log(f"corpus: {len(data.train)} train / {len(data.heldout)} held-out tokens")
    target = build_hybrid(shape, args.seed)
    with chunked_recurrence():
        target_stats = train_target(target, data, args, log)
        log(f"target: {target_stats}")
        head, head_stats = train_head(target, data, args, log)
    log(f"mtp head: {head_stats}")

    save_checkpoint(args.out, shape, target, head, args.dtype, tokenizer=args.tokenizer_dir)
    info = {
        "shape": asdict(shape),
        "trained": True,
        "seed": args.seed,
        "dtype": args.dtype,
        "recipe": {k: v for k, v in vars(args).items() if k not in ("out", "corpus")},
        "corpus_tokens": int(len(data.train)),
        "target_params": int(sum(v.size for _, v in tree_flatten(target.parameters()))),
        "mtp_params": int(sum(v.size for _, v in tree_flatten(head.parameters()))),
        "target": target_stats,
        "mtp": head_stats,
        "device": f"MLX {mx.__version__} {mx.default_device()}",
    }
    info["recipe"]["tokenizer_dir"] = str(args.tokenizer_dir)
    (args.out / "peer_model.json").write_text(json.dumps(info, indent=1) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
