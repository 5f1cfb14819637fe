"""Stop 54: how well the MTP head's confidence predicts acceptance, and what verifying only
confident drafts could give the demo's batch job (16 rows on the 2-core CPU).

    python bench/results/s54/cpu/draft_confidence_cpu.py [--prompts 32] [--depth 3]

The embedded default model with its MTP head (the host head, as the CPU serves it) at a fixed
depth, 16 rows, the held-out prompts, 64 tokens each. Each greedy draft's softmax probability
under the head is recorded with whether the target accepted it (row r's draft j is accepted iff
r accepted more than j). Prints acceptance by confidence band, and per threshold t (a row's
drafts stop at its first one under t): drafts verified and tokens emitted per row-round. Then
what a round would cost if it computed only the verified positions, on this machine's model of
a forward (a fixed cost per forward plus a cost per token, measured here at [16, 1] and
[48, 1]): each threshold's predicted rate over plain decoding at 16 rows. The head's own steps
are left out of both costs (they do not change with t).
"""

from __future__ import annotations

import argparse
import json
from collections import deque

import numpy as np
from forward_widths_cpu import forward_ms  # this directory's (the script's own path)

from workers import Engine, SamplingParams
from workers.drafters.mtp_host import HostMTPDrafter
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--depth", type=int, default=3)
    args = ap.parse_args()
    e = Engine.load(drafter="mtp", max_batch_size=16, draft_depth=args.depth,
                    adaptive_depth=False)  # fmt: skip
    drafter = e.drafter
    assert isinstance(drafter, HostMTPDrafter), type(drafter)
    pending: deque = deque()  # per drafting round: ([B, K] draft probabilities, [B] counts)
    steps: list[np.ndarray] = []
    real_select, real_draft = drafter._select, e._draft

    def select(request, logits, step):  # type: ignore[no-untyped-def]
        z = logits - logits.max(axis=-1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
        steps.append(p.max(axis=-1))
        return real_select(request, logits, step)

    def draft(*a, **k):  # type: ignore[no-untyped-def]
        steps.clear()
        proposal = real_draft(*a, **k)
        if steps:
            pending.append((np.stack(steps, axis=1), np.asarray(proposal.counts)))
        return proposal

    drafter._select = select  # type: ignore[method-assign]
    e._draft = draft  # type: ignore[method-assign]
    probs: list[float] = []
    accepted: list[bool] = []
    rounds: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (probs, counts, accepted)
    real_step = e.step

    def step():  # type: ignore[no-untyped-def]
        out = real_step()
        for s in e.take_round_stats():
            if s.draft_depth and pending:
                p, counts = pending.popleft()
                acc = np.asarray(s.accepted_per_row)
                if len(acc) == len(p):
                    rounds.append((p, counts, acc))
        return out

    prompts = [e.tokenizer.encode(t) for t in heldout_prompts(args.prompts)]
    sp = SamplingParams(max_tokens=64)
    for i, p in enumerate(prompts):
        e.add_request(f"r{i}", p, sp)
    while e.has_work():
        step()
    for p, counts, acc in rounds:
        for r in range(len(p)):
            for j in range(min(p.shape[1], int(counts[r]))):
                if j > acc[r]:
                    break  # position j was not reached (an earlier draft was rejected)
                probs.append(float(p[r, j]))
                accepted.append(bool(acc[r] > j))
    probs_a, acc_a = np.array(probs), np.array(accepted)
    bands = [0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.01]
    by_band = {
        f"{lo:.1f}-{hi:.1f}": {
            "drafts": int(((probs_a >= lo) & (probs_a < hi)).sum()),
            "accepted": round(float(acc_a[(probs_a >= lo) & (probs_a < hi)].mean()), 3)
            if ((probs_a >= lo) & (probs_a < hi)).any()
            else None,
        }
        for lo, hi in zip(bands, bands[1:])
    }
    plain16, wide48 = forward_ms(e.model, 16, 1, 100, 20), forward_ms(e.model, 48, 1, 100, 20)
    per_token = (wide48 - plain16) / 32
    fixed = plain16 - 16 * per_token
    rows = []
    for t in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        verified = tokens = row_rounds = 0
        cost = 0.0
        for p, counts, acc in rounds:
            below = p < t  # [B, K]
            gated = np.where(below.any(axis=1), below.argmax(axis=1), p.shape[1])  # [B]
            gated = np.minimum(gated, counts)
            verified += int((1 + gated).sum())
            tokens += int((1 + np.minimum(acc, gated)).sum())
            row_rounds += len(p)
            cost += fixed + per_token * float((1 + gated).sum())
        plain_cost = (fixed + per_token * 16) * tokens / 16  # plain steps for the same tokens
        rows.append({
            "threshold": t, "verified_per_row_round": round(verified / row_rounds, 3),
            "tokens_per_row_round": round(tokens / row_rounds, 3),
            "predicted_rate_over_plain": round(plain_cost / cost, 3),
        })  # fmt: skip
    print(json.dumps({
        "depth": args.depth, "row_rounds": sum(len(p) for p, _, _ in rounds),
        "drafts_reached": len(probs), "acceptance_by_confidence": by_band,
        "forward_ms_16x1_48x1": [round(plain16, 2), round(wide48, 2)],
        "model_fixed_ms_per_token_ms": [round(fixed, 2), round(per_token, 3)],
        "thresholds": rows,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
