"""Teacher-forced chained MTP forward over a whole sequence, exactly as inference sees it.

At inference, depth d of a chain that starts after target position t runs at position t+d-1 and
attends to the MTP cache entries 0..t (depth-1 entries built from true target hiddens) plus the
chain's own entries at depths 2..d. This module computes every chain start t of a sequence at
once with that attention pattern (a [N, d*N] boolean mask), so training and evaluation of depth
2/3 match what the engine does. Only the qwen3 decoder layer (the default model) is supported.
"""

from __future__ import annotations

import mlx.core as mx

from workers.mtp.qwen35 import MTPHead


def _qkv(attn: object, x: mx.array, offset: int) -> tuple[mx.array, mx.array, mx.array]:
    """qwen3 attention projections with RoPE at positions offset.. : each [B, heads, N, hd]."""
    a = attn  # mlx_lm.models.qwen3.Attention
    B, N, _ = x.shape
    q = a.q_norm(a.q_proj(x).reshape(B, N, a.n_heads, -1)).transpose(0, 2, 1, 3)  # type: ignore[attr-defined]
    k = a.k_norm(a.k_proj(x).reshape(B, N, a.n_kv_heads, -1)).transpose(0, 2, 1, 3)  # type: ignore[attr-defined]
    v = a.v_proj(x).reshape(B, N, a.n_kv_heads, -1).transpose(0, 2, 1, 3)  # type: ignore[attr-defined]
    return a.rope(q, offset=offset), a.rope(k, offset=offset), v  # type: ignore[attr-defined]


def chain_forward(mtp: MTPHead, hidden: mx.array, embeds: mx.array, depth: int) -> list[mx.array]:
    """Normed MTP outputs per depth, each [B, N, H] with N = hidden.shape[1].

    hidden: [B, N, H] target pre-norm hiddens h_0..h_{N-1}.
    embeds: [B, N + depth - 1, H] with embeds[:, j] = embed(x_{j+1}).
    Output d (1-based) at row t predicts x_{t+d+1}; its chain input at depth d is x_{t+d}.
    """
    B, N, _ = hidden.shape
    layer = mtp.layers[0]
    attn = layer.self_attn
    causal = mx.tril(mx.ones((N, N), dtype=mx.bool_))
    diag = mx.eye(N, dtype=mx.bool_)
    keys: list[mx.array] = []
    values: list[mx.array] = []
    outs: list[mx.array] = []
    prev = hidden
    for d in range(1, depth + 1):
        e = mtp.pre_fc_norm_embedding(embeds[:, d - 1 : d - 1 + N])
        x = mtp.fc(mx.concatenate([e, mtp.pre_fc_norm_hidden(prev)], axis=-1))
        q, k, v = _qkv(attn, layer.input_layernorm(x), offset=d - 1)
        keys.append(k)
        values.append(v)
        mask = mx.concatenate([causal] + [diag] * (d - 1), axis=1)  # [N, d*N]
        o = mx.fast.scaled_dot_product_attention(
            q,
            mx.concatenate(keys, axis=2),
            mx.concatenate(values, axis=2),
            scale=attn.scale,
            mask=mask,
        )
        h = x + attn.o_proj(o.transpose(0, 2, 1, 3).reshape(B, N, -1))
        g = h + layer.mlp(layer.post_attention_layernorm(h))
        outs.append(mtp.norm(g))
        prev = g
    return outs
