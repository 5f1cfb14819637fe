"""Self-distillation of the MTP head: continue its training on text the target itself writes.

The head drafts continuations of the target's own output: greedy decoding (the demo, the
evaluation jobs) feeds it the target's argmax tokens, and a draft is accepted when it matches
the next one. `--stage mtp` trains it on corpus text, whose tokens the target would often not
have written, so part of the head's capacity goes to contexts inference never shows it. Here
the target first decodes greedy continuations of random training-corpus windows; the head then
continues training (the same chained, inference-shaped loss against the target's own
distributions, train_default.train_mtp) on batches of those rows, or with `--share` below 1 of
those rows mixed with corpus windows. The loss scores every position of a row, the prompt's
too: at depth 3, 127 of a row's 317 scored positions predict corpus tokens only. Drafts only
ever decide how fast a round is: the verify is the target's, so no choice here can change what
the engine emits.

The shipped head is the first stage's, then two rounds of this on one H200 (bench/results/s42):

    python -m train.self_distill --out model --corpus corpus.npz --sequences 32768 \
        --gen-batch 1024 --mtp-steps 4000 --mtp-batch 32 --mtp-lr 1e-3 --weight-decay 0.1
    python -m train.self_distill --out model --corpus corpus.npz --sequences 32768 \
        --gen-batch 1024 --seed 1 --mtp-depth 4 --mtp-steps 8000 --mtp-batch 32 \
        --mtp-lr 1e-3 --weight-decay 0.1

Writes OUT/target/mtp.safetensors and appends the round to `mtp_self_distill` in
OUT/train_summary.json (the first stage's record stays). No held-out text is read: prompts come
from the training split only.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from train import artifacts, corpus
from train.train_default import Corpus, TrainConfig, saved_target, train_mtp
from workers.mtp.loader import load_mtp_head


@dataclass
class DistillConfig:
    sequences: int = 32768  # greedy continuations written by the target
    prompt_len: int = 128  # corpus tokens before each continuation
    # Tokens the target writes: a row of 128 + 193 = 321 is the [B, T + 1] batch of T = 320 that
    # train_mtp's loss takes (shorter than the first stage's 512: one more row per batch's time).
    new_len: int = 193
    gen_batch: int = 512  # rows decoded together
    share: float = 1.0  # of each training batch's rows: generated; the rest corpus windows

    def __post_init__(self) -> None:
        for name in ("sequences", "prompt_len", "new_len", "gen_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.share <= 1.0:  # 0 would be --stage mtp with a wasted generation
            raise ValueError(f"share must be in (0, 1], got {self.share}")


def continuations(target: Any, stream: np.ndarray, dcfg: DistillConfig, seed: int) -> np.ndarray:
    """int32 [sequences, prompt_len + new_len]: each row a random window of `stream` followed by
    the target's greedy continuation of it, decoded `gen_batch` rows at a time (windows of one
    length need no padding, so mlx-lm's plain KV cache serves the batch)."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(stream) - dcfg.prompt_len, size=dcfg.sequences)
    rows = []
    for i in range(0, dcfg.sequences, dcfg.gen_batch):
        chunk = starts[i : i + dcfg.gen_batch]
        prompts = np.stack([stream[s : s + dcfg.prompt_len] for s in chunk])  # [b, prompt_len]
        cache = make_prompt_cache(target)
        token = mx.argmax(target(mx.array(prompts), cache=cache)[:, -1], axis=-1)  # [b]
        new = [token]
        for _ in range(dcfg.new_len - 1):
            token = mx.argmax(target(token[:, None], cache=cache)[:, -1], axis=-1)
            mx.async_eval(token)  # the next step is built while this one runs
            new.append(token)
        rows.append(np.concatenate([prompts, np.array(mx.stack(new, axis=1))], axis=1))
    return np.concatenate(rows).astype(np.int32)


def mixed_batches(
    generated: np.ndarray, stream: np.ndarray, batch: int, share: float, seed: int
) -> Iterator[np.ndarray]:
    """Endless [batch, L] batches (L = generated rows' length): batch * share (rounded half up)
    random generated rows, then corpus windows of the same length."""
    rng = np.random.default_rng(seed)
    n_gen = max(1, int(batch * share + 0.5))
    windows = corpus.batches(stream, batch - n_gen, generated.shape[1] - 1, seed + 1)
    while True:
        rows = generated[rng.integers(0, len(generated), size=n_gen)]
        yield rows if n_gen == batch else np.concatenate([rows, next(windows)])


def load_or_generate(
    path: Path | None, target: Any, stream: np.ndarray, dcfg: DistillConfig, seed: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """(continuations, what made them: seed, shape, seconds). `path` (.npz) is read when it
    exists, and must hold continuations of this seed and shape; else they are generated and
    written there."""
    made = {"seed": seed, "sequences": dcfg.sequences, "prompt_len": dcfg.prompt_len,
            "new_len": dcfg.new_len}  # fmt: skip
    if path is not None and path.suffix != ".npz":
        raise ValueError(f"--generated {path}: name a .npz file (numpy adds the suffix otherwise)")
    if path is not None and path.exists():
        with np.load(path) as z:
            rows, meta = z["rows"], json.loads(z["meta"].tobytes())
        if {k: meta.get(k) for k in made} != made:
            raise ValueError(
                f"{path} holds continuations of {meta}, not of {made}; use another file"
            )
        return rows, {**made, "generate_s": meta["generate_s"], "read_from": str(path)}
    t0 = time.time()
    rows = continuations(target, stream, dcfg, seed)
    made["generate_s"] = round(time.time() - t0, 1)
    if path is not None:
        meta_bytes = np.frombuffer(json.dumps(made).encode(), dtype=np.uint8)
        np.savez(path, rows=rows, meta=meta_bytes)
    return rows, made


def self_distill(
    cfg: TrainConfig,
    dcfg: DistillConfig,
    out: Path,
    data: Corpus | None,
    log: Any,
    generated_path: Path | None = None,
) -> dict[str, Any]:
    """Generate (or read from `generated_path`), then continue the head's training in OUT;
    returns the round's record."""
    target, data = saved_target(cfg, out, data)
    tcfg = json.loads((out / "target" / "config.json").read_text())
    head = load_mtp_head(out / "target", tcfg, dtype=mx.float32)
    if head.args.hidden_norm != "pre_norm":  # train_mtp's chain reads the pre-norm hidden
        raise ValueError(
            f"{out / 'target' / 'config.json'}: the head reads the {head.args.hidden_norm} "
            "hidden; self_distill trains heads that read it pre-norm (specfleet_mtp_hidden)"
        )
    # Seed offsets as train_default's stages: +4 the prompts' starts, +5 the batches' rows. A
    # round of seed s + 1 thus draws its starts from round s's row-picking seed: harmless (they
    # index different arrays) and kept, as the shipped head's rounds were made so.
    generated, made = load_or_generate(generated_path, target, data.train, dcfg, cfg.seed + 4)
    log(f"{generated.shape[0]} continuations of {dcfg.new_len} tokens: {made}")
    batches = mixed_batches(generated, data.train, cfg.mtp_batch, dcfg.share, cfg.seed + 5)
    head, losses, secs = train_mtp(cfg, target, tcfg, data.train, log, head, batches)
    artifacts.save_mtp(out / "target", head)
    # Recorded beside the head's first stage (config.mtp_*, final_loss.mtp), which it continues;
    # each round is appended, as a head may be self-distilled more than once.
    path = out / "train_summary.json"
    summary = json.loads(path.read_text())
    record = {**asdict(dcfg), **{k: v for k, v in asdict(cfg).items() if k.startswith("mtp_")}}
    record.update(seed=cfg.seed, weight_decay=cfg.weight_decay, generate_s=made["generate_s"])
    record.update(train_s=round(secs, 1), final_loss=round(float(np.mean(losses[-25:])), 4))
    summary.setdefault("mtp_self_distill", []).append(record)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("workers/default_model"))
    p.add_argument("--corpus", type=Path, help="a corpus written by train_default --export-corpus")
    p.add_argument("--generated", type=Path, help="continuations (.npz): read if there, else write")
    p.add_argument("--weight-decay", type=float, help="default: OUT/train_summary.json's")
    trained = {k: v for k, v in asdict(TrainConfig()).items() if k.startswith("mtp_")}
    for field, default in {**asdict(DistillConfig()), **trained, "seed": 0}.items():
        p.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    ns = vars(p.parse_args(argv))
    out, data, generated = ns.pop("out"), ns.pop("corpus"), ns.pop("generated")
    dcfg = DistillConfig(**{k: ns.pop(k) for k in asdict(DistillConfig())})
    # The first stage's settings where a round does not set them: its weight decay, and its
    # training split (include_tests) when the corpus is rebuilt from the stdlib.
    first = json.loads((out / "train_summary.json").read_text()).get("config", {})
    if ns["weight_decay"] is None:
        ns["weight_decay"] = first.get("weight_decay", TrainConfig.weight_decay)
    cfg = TrainConfig(**ns, include_tests=first.get("include_tests", False))

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    done = self_distill(cfg, dcfg, out, Corpus.load(data) if data else None, log, generated)
    log(f"self-distilled head written to {out / 'target'}: {json.dumps(done)}")


if __name__ == "__main__":
    main()
