"""Train specfleet's embedded default model with MLX on CPU, reproducibly from a seed.

Stages: byte-level BPE tokenizer -> qwen3 target (next-token LM) -> MTP head (target frozen,
distilled from the target's own next-token distributions at depths 1..3 with the chained,
inference-shaped attention of train/mtp_chain.py) -> small qwen3 draft model (distilled from the
target). Writes workers/default_model/{target,draft}/ and heldout_prompts.jsonl.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 \
        .venv/bin/python -m train.train_default --out workers/default_model

(Linux `mlx[cpu]` wheels link the reference BLAS, ~20x slower for matmuls; preloading any
OpenBLAS, e.g. Debian's libopenblas0-pthread, is optional and changes only speed and fp rounding.)
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_map

from train import artifacts, corpus
from train.mtp_chain import chain_forward
from train.prompts import write_heldout_prompts
from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits
from workers.mtp.qwen35 import MTPArgs, MTPHead


@dataclass
class TrainConfig:
    seed: int = 0
    vocab_size: int = 2048
    seq_len: int = 256
    context: int = 2048
    include_tests: bool = False  # train on the stdlib test suites too (held-out split unchanged)
    weight_decay: float = 0.01
    # target: qwen3, 4 x (256 hidden, 4 heads x 64, 2 kv heads, 640 MLP)
    target_layers: int = 4
    target_hidden: int = 256
    target_kv_heads: int = 0  # 0: hidden // 128
    target_inter: int = 640
    target_steps: int = 1100
    target_batch: int = 8
    target_lr: float = 3e-3
    # MTP head (one qwen3 layer of the target's shape), chained depths trained jointly
    mtp_depth: int = 3
    mtp_steps: int = 200
    mtp_batch: int = 8
    mtp_lr: float = 2e-3
    # draft: qwen3, 2 x (192 hidden, 3 heads x 64, 1 kv head, 512 MLP)
    draft_layers: int = 2
    draft_hidden: int = 192
    draft_inter: int = 512
    draft_steps: int = 600
    draft_batch: int = 8
    draft_lr: float = 3e-3

    def __post_init__(self) -> None:
        for name in ("target_steps", "mtp_steps", "draft_steps", "seq_len", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 1 <= self.mtp_depth <= 4:
            raise ValueError(f"mtp_depth must be in 1..4, got {self.mtp_depth}")


def schedule(lr: float, steps: int) -> Callable[[mx.array], mx.array]:
    warm = max(1, min(50, steps // 10))
    return optim.join_schedules(
        [
            optim.linear_schedule(lr / warm, lr, warm),
            optim.cosine_decay(lr, steps - warm, lr * 0.1),
        ],
        [warm],
    )


def soft_ce(logits: mx.array, probs: mx.array) -> mx.array:
    """Mean cross-entropy of `logits` against the teacher distribution `probs` ([..., V])."""
    return -(probs * nn.log_softmax(logits.astype(mx.float32), axis=-1)).sum(-1).mean()


def fit(
    name: str,
    module: nn.Module,
    loss_fn: Callable[..., mx.array],
    data: Iterator[np.ndarray],
    steps: int,
    lr: float,
    log: Callable[[str], None],
    weight_decay: float = 0.01,
    heldout: Callable[[], float] | None = None,
) -> list[float]:
    """AdamW + warmup/cosine on `module` (the only trainable state); returns per-step losses.

    heldout, when given, is evaluated and logged every 500 steps and at the end.
    """
    opt = optim.AdamW(learning_rate=schedule(lr, steps), weight_decay=weight_decay)
    state = [module.state, opt.state]
    grad_fn = nn.value_and_grad(module, loss_fn)

    @partial(mx.compile, inputs=state, outputs=state)
    def step(batch: mx.array) -> mx.array:
        loss, grads = grad_fn(batch)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        opt.update(module, grads)
        return loss

    losses, t0 = [], time.time()
    for i in range(steps):
        loss = step(mx.array(next(data)))
        mx.eval(state, loss)
        losses.append(float(loss.item()))  # type: ignore[arg-type]
        if i % 25 == 0 or i == steps - 1:
            avg = float(np.mean(losses[-25:]))
            log(f"{name} step {i + 1}/{steps} loss {avg:.3f} ({time.time() - t0:.0f}s)")
        if heldout is not None and ((i + 1) % 500 == 0 or i == steps - 1):
            log(f"{name} step {i + 1}/{steps} held-out loss {heldout():.3f}")
    return losses


@dataclass
class Corpus:
    """Token streams (int32 [N], files joined with EOS) and where they came from."""

    train: np.ndarray
    heldout: np.ndarray
    python_version: str
    train_files: int
    heldout_files: list[str]  # relative paths

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path, train=self.train.astype(np.uint16), heldout=self.heldout.astype(np.uint16),
            meta=np.frombuffer(json.dumps({
                "python_version": self.python_version, "train_files": self.train_files,
                "heldout_files": self.heldout_files,
            }).encode(), dtype=np.uint8),
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Corpus:
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes())
            return cls(z["train"].astype(np.int32), z["heldout"].astype(np.int32), **meta)


def split_sources(cfg: TrainConfig) -> tuple[list[corpus.SourceFile], list[corpus.SourceFile]]:
    """(train files, held-out files); evaluation text stays the default split's (no tests)."""
    train_files, heldout = corpus.split(corpus.list_sources(include_tests=cfg.include_tests))
    return train_files, corpus.without_tests(heldout)


def build_corpus(
    tok: Any, train_files: list[corpus.SourceFile], heldout: list[corpus.SourceFile]
) -> Corpus:
    eos = tok.token_to_id(corpus.EOS)
    assert eos is not None, "the tokenizer lacks the EOS special token"
    return Corpus(
        corpus.encode_stream(tok, train_files, eos),
        corpus.encode_stream(tok, heldout, eos),
        corpus.python_version(),
        len(train_files),
        [f.rel for f in heldout],
    )


def train_all(
    cfg: TrainConfig,
    out: Path,
    log: Callable[[str], None],
    tokenizer: Path | None = None,
    data: Corpus | None = None,
) -> dict[str, Any]:
    """Every stage. `tokenizer` reuses a tokenizer.json instead of training one; `data` (a
    corpus exported with --export-corpus) trains where neither the stdlib of the recipe's
    Python nor `tokenizers` is installed (a GPU box): weights only, tokenizer files copied later.
    """
    mx.random.seed(cfg.seed)
    t_start = time.time()
    tok: Any = None
    heldout = []
    if data is None:
        train_files, heldout = split_sources(cfg)
        if tokenizer is not None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(tokenizer))
        else:
            tok = artifacts.train_tokenizer([f.text for f in train_files], cfg.vocab_size)
        data = build_corpus(tok, train_files, heldout)
    stream = data.train
    log(f"python {data.python_version}: {data.train_files} train files, {len(stream)} tokens")
    held = corpus.eval_windows(data.heldout, cfg.seq_len, 64)

    tcfg = artifacts.qwen3_config(
        vocab=cfg.vocab_size, hidden=cfg.target_hidden, layers=cfg.target_layers,
        heads=cfg.target_hidden // 64,
        kv_heads=cfg.target_kv_heads or max(1, cfg.target_hidden // 128),
        inter=cfg.target_inter, ctx=cfg.context,
    )  # fmt: skip
    target = artifacts.build_qwen3(tcfg)

    def lm_loss(batch: mx.array) -> mx.array:
        logits = target(batch[:, :-1])
        return nn.losses.cross_entropy(logits, batch[:, 1:]).mean()

    def heldout_loss() -> float:
        return float(
            np.mean([lm_loss(mx.array(held[i : i + 16])).item() for i in range(0, len(held), 16)])
        )

    t0 = time.time()
    seed = cfg.seed
    batches = corpus.batches(stream, cfg.target_batch, cfg.seq_len, seed + 1)
    tl = fit(
        "target", target, lm_loss, batches, cfg.target_steps, cfg.target_lr, log,
        cfg.weight_decay, heldout_loss,
    )  # fmt: skip
    final_heldout = heldout_loss()
    times = {"target_s": time.time() - t0}
    target.freeze()

    mtp, ml, times["mtp_s"] = train_mtp(cfg, target, tcfg, stream, log)

    # The draft learns from the target as shipped (fp16-rounded), so `--stage draft` on a saved
    # target reproduces this stage exactly.
    target.update(tree_map(lambda a: a.astype(mx.float16).astype(mx.float32), target.parameters()))
    draft, dcfg, dl, times["draft_s"] = train_draft(cfg, target, stream, log)

    target.unfreeze()
    artifacts.save_model_dir(out / "target", target, tcfg, tok, mtp=mtp)
    artifacts.save_model_dir(out / "draft", draft, dcfg, tok)
    if heldout:  # the prompts need the held-out text (absent when training from an export)
        write_heldout_prompts(out / "heldout_prompts.jsonl", heldout, seed=cfg.seed)
        (out / "heldout_files.txt").write_text("".join(f.rel + "\n" for f in heldout))
    times["total_s"] = time.time() - t_start
    summary = {
        "python_version": data.python_version,
        "device": f"{platform.node() or 'host'}: MLX {mx.__version__} {mx.default_device()}",
        "config": asdict(cfg),
        "train_files": data.train_files,
        "heldout_files": len(data.heldout_files),
        "train_tokens": int(len(stream)),
        "heldout_target_loss": round(final_heldout, 4),
        "final_loss": {
            "target": float(np.mean(tl[-25:])),
            "mtp": float(np.mean(ml[-25:])),
            "draft": float(np.mean(dl[-25:])),
        },
        "wall_time_s": {k: round(v, 1) for k, v in times.items()},
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"done in {times['total_s']:.0f}s: {json.dumps(summary['final_loss'])}")
    return summary


def train_mtp(
    cfg: TrainConfig,
    target: nn.Module,
    tcfg: dict[str, Any],
    stream: np.ndarray,
    log: Callable[[str], None],
    head: MTPHead | None = None,
    batches: Iterator[np.ndarray] | None = None,
) -> tuple[MTPHead, list[float], float]:
    """The MTP head, distilled from the frozen target's own next-token distributions at depths
    1..mtp_depth with the chained, inference-shaped attention of train/mtp_chain.py: (head,
    losses, seconds). Sets the head's fields in `tcfg` (the target's config).

    `head` continues training a head (else a new one); `batches` ([mtp_batch, T + 1] windows)
    replaces random windows of `stream` (train/self_distill.py feeds the target's own text)."""
    tcfg["mtp_num_hidden_layers"] = 1
    tcfg["specfleet_mtp_hidden"] = "pre_norm"  # chain_forward trains on the pre-norm hidden
    mtp = head if head is not None else MTPHead(MTPArgs.from_target_config(tcfg))
    mx.eval(mtp.parameters())
    D = cfg.mtp_depth
    weights = [1.0, 0.6, 0.4, 0.3][:D]

    def mtp_loss(batch: mx.array) -> mx.array:
        # batch [B, T+1]: h_t for t < N = T+1-D-... ; teacher = target's own distributions.
        T = batch.shape[1] - 1
        N = T - D
        h, logits = target_hidden_and_logits(target, batch[:, :T])
        h, probs = mx.stop_gradient(h), mx.stop_gradient(mx.softmax(logits, axis=-1))
        e = mx.stop_gradient(embed(target, batch[:, 1 : N + D]))  # e(x_1..x_{N+D-1})
        outs = chain_forward(mtp, h[:, :N], e, D)
        total = mx.array(0.0)
        for d, (w, o) in enumerate(zip(weights, outs, strict=True), start=1):
            total = total + w * soft_ce(lm_head(target, o), probs[:, d : d + N])
        return total / sum(weights)

    t0 = time.time()
    if batches is None:
        batches = corpus.batches(stream, cfg.mtp_batch, cfg.seq_len, cfg.seed + 2)
    losses = fit("mtp", mtp, mtp_loss, batches, cfg.mtp_steps, cfg.mtp_lr, log, cfg.weight_decay)
    return mtp, losses, time.time() - t0


def saved_target(cfg: TrainConfig, out: Path, data: Corpus | None) -> tuple[nn.Module, Corpus]:
    """The target saved in OUT/target (as shipped: fp16 weights, run in fp32), frozen, and the
    corpus: `data` (a --corpus export) or the stdlib encoded with OUT/target's tokenizer."""
    from mlx_lm.utils import load_model  # the weights alone: no tokenizer libraries needed

    target = load_model(out / "target")[0]
    target.set_dtype(mx.float32)
    target.freeze()
    if data is None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(out / "target" / "tokenizer.json"))
        data = build_corpus(tok, *split_sources(cfg))
    return target, data


def retrain_mtp(
    cfg: TrainConfig, out: Path, log: Callable[[str], None], data: Corpus | None = None
) -> None:
    """`--stage mtp`: re-run only the MTP head's stage against the target saved in OUT/target,
    and update train_summary.json."""
    target, data = saved_target(cfg, out, data)
    tcfg = json.loads((out / "target" / "config.json").read_text())
    mtp, losses, secs = train_mtp(cfg, target, tcfg, data.train, log)
    artifacts.save_mtp(out / "target", mtp)
    # train_mtp set the head's fields: a target saved without a head must now declare it.
    (out / "target" / "config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    record_stage(out, "mtp", cfg, losses, secs, log)


def record_stage(
    out: Path,
    stage: str,
    cfg: TrainConfig,
    losses: list[float],
    secs: float,
    log: Callable[[str], None],
) -> None:
    """Put one retrained stage's settings, final loss and time in OUT/train_summary.json."""
    path = out / "train_summary.json"
    summary = json.loads(path.read_text())
    summary["config"].update({k: v for k, v in asdict(cfg).items() if k.startswith(stage + "_")})
    summary["final_loss"][stage] = float(np.mean(losses[-25:]))
    wall = summary["wall_time_s"]
    wall["total_s"] = round(wall["total_s"] - wall[stage + "_s"] + secs, 1)
    wall[stage + "_s"] = round(secs, 1)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    log(f"{stage} retrained in {secs:.0f}s: loss {summary['final_loss'][stage]:.3f}")


def train_draft(
    cfg: TrainConfig, target: nn.Module, stream: np.ndarray, log: Callable[[str], None]
) -> tuple[nn.Module, dict[str, Any], list[float], float]:
    """Distil the draft model from the frozen target: (draft, config, losses, seconds)."""
    mx.random.seed(cfg.seed + 3)  # the draft's init does not depend on earlier stages
    dcfg = artifacts.qwen3_config(
        vocab=cfg.vocab_size, hidden=cfg.draft_hidden, layers=cfg.draft_layers,
        heads=cfg.draft_hidden // 64, kv_heads=1, inter=cfg.draft_inter, ctx=cfg.context,
    )  # fmt: skip
    draft = artifacts.build_qwen3(dcfg)

    def draft_loss(batch: mx.array) -> mx.array:
        probs = mx.stop_gradient(mx.softmax(target(batch[:, :-1]), axis=-1))
        return 0.5 * soft_ce(draft(batch[:, :-1]), probs) + 0.5 * lm_loss_of(draft, batch)

    t0 = time.time()
    data = corpus.batches(stream, cfg.draft_batch, cfg.seq_len, cfg.seed + 3)
    losses = fit(
        "draft", draft, draft_loss, data, cfg.draft_steps, cfg.draft_lr, log, cfg.weight_decay
    )
    return draft, dcfg, losses, time.time() - t0


def retrain_draft(
    cfg: TrainConfig, out: Path, log: Callable[[str], None], data: Corpus | None = None
) -> None:
    """`--stage draft`: re-run only the draft stage against the target saved in OUT/target (the
    same corpus options as --stage mtp), and update train_summary.json."""
    target, data = saved_target(cfg, out, data)
    draft, dcfg, losses, secs = train_draft(cfg, target, data.train, log)
    artifacts.save_model_dir(out / "draft", draft, dcfg, None)
    for name in artifacts.TOKENIZER_FILES:
        shutil.copy(out / "target" / name, out / "draft" / name)  # one tokenizer for both
    record_stage(out, "draft", cfg, losses, secs, log)


def lm_loss_of(model: nn.Module, batch: mx.array) -> mx.array:
    return nn.losses.cross_entropy(model(batch[:, :-1]), batch[:, 1:]).mean()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("workers/default_model"))
    p.add_argument(
        "--stage", choices=["all", "draft", "mtp"], default="all",
        help="all: every stage; draft / mtp: only the draft model / the MTP head, distilled "
        "from OUT/target",
    )  # fmt: skip
    p.add_argument("--tokenizer", type=Path, help="reuse this tokenizer.json (else train one)")
    p.add_argument("--export-corpus", type=Path, help="write the tokenized corpus (.npz), exit")
    p.add_argument("--corpus", type=Path, help="train from a corpus written by --export-corpus")
    for field, default in asdict(TrainConfig()).items():
        flag = f"--{field.replace('_', '-')}"
        if isinstance(default, bool):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=type(default), default=default)
    ns = vars(p.parse_args(argv))
    out, stage = ns.pop("out"), ns.pop("stage")
    tokenizer, export, data = ns.pop("tokenizer"), ns.pop("export_corpus"), ns.pop("corpus")
    cfg = TrainConfig(**ns)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if export is not None:
        if tokenizer is None:
            p.error("--export-corpus needs --tokenizer (the tokenizer the corpus is encoded with)")
        from tokenizers import Tokenizer

        built = build_corpus(Tokenizer.from_file(str(tokenizer)), *split_sources(cfg))
        built.save(export)
        log(f"wrote {export}: {len(built.train)} train / {len(built.heldout)} held-out tokens")
    elif stage == "draft":
        retrain_draft(cfg, out, log, Corpus.load(data) if data else None)
    elif stage == "mtp":
        retrain_mtp(cfg, out, log, Corpus.load(data) if data else None)
    else:
        train_all(cfg, out, log, tokenizer, Corpus.load(data) if data else None)


if __name__ == "__main__":
    main()
