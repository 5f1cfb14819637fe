"""The MTP head's step on the host (NumPy, or C): a Qwen3-layout head drafting on MLX's CPU.

Why: MLX's CPU backend runs every graph node as a task of its own queue, ~3-7 us each whatever
its size, and one head step builds ~170 nodes over the engine's ragged cache (RMSNorms and RoPE
expand to their fallback ops on the CPU; workers/cpu_ops.py). At B = 1 on the 2-core CPU VM a
depth-3 MTP round spent ~6 ms in the head (2.0 ms building its graphs in Python, 3.7 ms running
them) against ~10 ms in the verify: the head, 1 decoder layer, cost 0.8 of a 10-layer plain
step. NumPy runs the same step in ~0.5 ms (its ops cost ~1 us; the matmuls are the same BLAS
gemv), and on the CPU reading the verify's outputs back costs nothing extra, since MLX's CPU
`async_eval` computes the round while it launches it (workers/backend.py).

Drafting steps of up to NATIVE_MAX_ROWS rows run in C where the machine has a C compiler
(host_step.c, built by host_native.py): one call in place of ~40 NumPy calls of 1-5 us each,
which were most of a chained step (0.28 against 0.12 ms at B = 1, warm; a single stream's
request +6-8%, bench/results/s47/README.md).

The numbers are not MLX's bit for bit (other kernels, other summation orders). They need not be:
drafts only decide how many tokens a round emits, the target's verify decides which
(workers/verify.py), and a sampled draft's distribution q is the one it was drawn from.

Supported (`HostHead.unsupported_reason`): a head whose layer is mlx-lm's
`qwen3.TransformerBlock` (q/k norms, plain RoPE, no biases), its weights and the target's
embedding and lm_head float32 weights alone (not quantized); other heads keep the MLX drafter
(workers/drafters/mtp.py), and HostHead refuses them.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from workers.mtp.hidden import text_model
from workers.mtp.host_native import NativeStep, library

# The most rows a drafting step runs in C (host_native.py); larger batches and a prompt's pairs
# (up to 64 a row, no query) keep NumPy. Since host_step.c streams [in, out] weight rows for up
# to 4 rows at once, one step (2-core CPU VM, default model's head, warm) ran B = 8 / 16 in
# 447-490 / 904-1,005 us against NumPy's 952-1,089 / 1,337-1,992, and 64 prompt pairs level.
# In turns the engines read level there (plain ÷ MTP 1.089 / 1.072 at B = 8 depth 3, 0.992 /
# 0.983 at B = 16 depth 1: few drafting rounds at those sizes); bench/results/s48/native_io/.
NATIVE_MAX_ROWS = 16


def _np(a: mx.array) -> np.ndarray:
    return np.array(a, dtype=np.float32)


def _shared(a: mx.array) -> np.ndarray:
    """A read-only NumPy view of a float32 MLX array, no copy (the target's embedding and
    lm_head, [V, H]: V x H x 4 bytes, large for a large vocabulary); a copy where MLX cannot
    export its buffer as one."""
    mx.eval(a)
    try:
        view = np.asarray(memoryview(a))  # type: ignore[arg-type]  # MLX exports its buffer
    except (TypeError, ValueError, BufferError):
        return _np(a)
    if view.dtype != np.float32 or view.shape != tuple(a.shape):
        return _np(a)
    view.flags.writeable = False
    return view


class HostLinear:
    """x [..., in] times a weight w [out, in] (nn.Linear's layout) transposed: [..., out].

    Rows run as one 2-D product with the weight as [in, out], copied once (the head's own
    weights are small): a drafting step's [B, 1, in] as a 3-D product would be B gemvs, and
    OpenBLAS's GEMM beats that from 2 rows on (the head's step at B = 8 on the 2-core CPU VM).
    The target's lm_head ([V, H], `shared`: viewed, never copied) is too large for that: a
    GEMM packs it on every call (8 rows: ~160 us), so it runs as gemvs up to 3 rows and from
    4 with the weight on the left (`w @ x.T`: ~100 us at 8 rows)."""

    def __init__(self, w: np.ndarray, shared: bool = False) -> None:
        self.oi = w if shared else None  # [out, in]: the shared weight's view, no copy
        self.io = w.T if shared else np.ascontiguousarray(w.T)  # [in, out]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        M = x.size // x.shape[-1]
        if M == 1:
            return x @ self.io  # a gemv
        out = (*x.shape[:-1], self.io.shape[1])
        if self.oi is None:
            return (x.reshape(M, -1) @ self.io).reshape(out)
        if M >= 4:
            return (self.oi @ x.reshape(M, -1).T).T.reshape(out)
        return (x.reshape(M, 1, -1) @ self.io).reshape(out)  # one gemv a row


class HostHead:
    """A one-layer MTP head's weights as NumPy arrays, and its step (shapes below: B rows,
    W window positions, H hidden, NH / NK query / key-value heads of D, V vocabulary). The
    head's weights are copied once, when it is made, and the target's embedding and lm_head
    viewed: a model whose weights are replaced later needs a new HostHead."""

    def __init__(self, head: Any, target: Any) -> None:
        reason = self.unsupported_reason(head, target)
        if reason:
            raise ValueError(
                f"the MTP head cannot run on the host: {reason}; use MTPDrafter (MLX's steps, "
                "SPECFLEET_HOST_MTP=0)"
            )
        layer = head.layers[0]
        attn, mlp = layer.self_attn, layer.mlp
        self.post_norm = bool(head.args.post_norm)
        self.nh, self.nk = attn.n_heads, attn.n_kv_heads
        self.d = int(attn.q_norm.weight.shape[0])
        self.scale = float(attn.scale)
        base = float(attn.rope.base)
        self.inv_freq = base ** (-np.arange(0, self.d, 2, dtype=np.float64) / self.d)  # [D/2]
        self._cos = self._sin = np.zeros((0, self.d // 2), dtype=np.float32)  # [positions, D/2]
        self.norms = {
            name: (_np(m.weight), float(m.eps))
            for name, m in (
                ("e", head.pre_fc_norm_embedding),
                ("h", head.pre_fc_norm_hidden),
                ("ln1", layer.input_layernorm),
                ("ln2", layer.post_attention_layernorm),
                ("q", attn.q_norm),
                ("k", attn.k_norm),
                ("out", head.norm),
            )
        }
        # Weights copied (`HostLinear`); k and v as one matmul, gate and up as another.
        self.fc = HostLinear(_np(head.fc.weight))  # [H, 2H]
        self.q_proj = HostLinear(_np(attn.q_proj.weight))  # [NH D, H]
        kv = [attn.k_proj.weight, attn.v_proj.weight]
        self.kv_proj = HostLinear(np.concatenate([_np(w) for w in kv]))  # [2 NK D, H]
        self.o_proj = HostLinear(_np(attn.o_proj.weight))  # [H, NH D]
        gate_up = [mlp.gate_proj.weight, mlp.up_proj.weight]
        self.gate_up = HostLinear(np.concatenate([_np(w) for w in gate_up]))  # [2F, H]
        self.down = HostLinear(_np(mlp.down_proj.weight))  # [H, F]
        tm = text_model(target)
        # The target's own buffers, viewed (read-only): the head's small weights are copied
        # above (transposed, fused), but these two are as large as the vocabulary.
        self.embed = _shared(tm.model.embed_tokens.weight)  # [V, H]
        lm = getattr(tm, "lm_head", None)
        self.lm_head = self.embed if lm is None else _shared(lm.weight)  # [V, H], x @ W.T
        self.lm_head_linear = HostLinear(self.lm_head, shared=True)
        dll = library()  # the step in C where this machine can build it (host_native.py)
        self.native = NativeStep(dll, self) if dll is not None else None

    @staticmethod
    def unsupported_reason(head: Any, target: Any) -> str:
        """Why this class cannot run `head` for `target` ('' when it can)."""
        from mlx_lm.models import qwen3

        layers = getattr(head, "layers", [])
        # isinstance: the CPU's routes give modules subclasses computing the same (cpu_ops.py)
        if len(layers) != 1 or not isinstance(layers[0], qwen3.TransformerBlock):
            return "its layer is not a qwen3 decoder layer"
        attn = layers[0].self_attn
        rope = attn.rope
        if not isinstance(rope, nn.RoPE) or rope.traditional or rope.scale != 1.0:
            return "its RoPE is scaled or traditional"
        if rope.dims != attn.q_norm.weight.shape[0]:
            return "its RoPE rotates part of each head"
        tm = text_model(target)
        modules = {"the head": head, "the target's embedding": tm.model.embed_tokens,
                   "the target's lm_head": getattr(tm, "lm_head", None)}  # fmt: skip
        for name, m in modules.items():
            if m is None:
                continue
            leaves: Any = tree_flatten(m.parameters())
            kinds = {v.dtype for _, v in leaves}
            if kinds != {mx.float32}:
                return f"{name} is not float32 ({sorted(map(str, kinds))})"
            extra = {k.split(".")[-1] for k, _ in leaves} - {"weight"}
            if extra:  # a bias, or a quantized layer's scales: this class reads weights only
                return f"{name} has parameters other than weights ({sorted(extra)})"
        return ""

    def step(
        self, hidden: np.ndarray, tokens: np.ndarray, cache: HostCache, last: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The head over pairs (hidden [B, W, H], the token after each [B, W]) at each row's
        next cache positions: writes every pair's key and value there (the caller commits the
        valid ones), and returns the head's output at one pair a row, `last` [B] (chain
        [B, 1, H] for the next depth, normed [B, 1, H] for the lm_head). No other position's
        query, attention or MLP runs: the MLX head computes them all and keeps one
        (drafters/mtp.py), and a prompt's pairs (`last` None) need only their keys and values
        (then both returned arrays are empty)."""
        B, W, H = hidden.shape
        if self.native is not None and last is not None and B <= NATIVE_MAX_ROWS:
            cache.reserve(W)
            self._tables(int(cache.lengths.max(initial=0)) + W)
            return self.native(hidden, tokens, cache, last, self._cos, self._sin)
        nh, nk, d = self.nh, self.nk, self.d
        e = self._norm(self.embed[tokens], "e")
        x = self.fc(np.concatenate([e, self._norm(hidden, "h")], axis=-1))  # [B, W, H]
        a = self._norm(x, "ln1")
        pos = cache.lengths[:, None] + np.arange(W)  # [B, W]: entry t sits at position t
        kv = self.kv_proj(a)  # [B, W, 2 NK D]
        k = self._rope(self._norm(kv[..., : nk * d].reshape(B, W, nk, d), "k"), pos)
        cache.write(k, kv[..., nk * d :].reshape(B, W, nk, d))
        if last is None:
            empty = np.zeros((B, 0, H), dtype=np.float32)
            return empty, empty
        rows = np.arange(B)
        at = pos[rows, last][:, None]  # [B, 1] the wanted pairs' positions
        q = self._rope(self._norm(self.q_proj(a[rows, last]).reshape(B, 1, nh, d), "q"), at)
        x = x[rows, last][:, None] + self.o_proj(self._attention(q, at[:, 0], cache))
        gu = self.gate_up(self._norm(x, "ln2"))  # [B, 1, 2F]
        g, u = gu[..., : gu.shape[-1] // 2], gu[..., gu.shape[-1] // 2 :]
        x = x + self.down(g * (0.5 + 0.5 * np.tanh(0.5 * g)) * u)  # SiLU(g) * u
        normed = self._norm(x, "out")
        return (normed if self.post_norm else x), normed

    def logits(self, normed: np.ndarray) -> np.ndarray:
        """[B, H] post-norm hidden -> [B, V] logits through the target's (shared) lm_head."""
        return self.lm_head_linear(normed)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        w, eps = self.norms[name]
        mean_square = np.add.reduce(x * x, axis=-1, keepdims=True) / x.shape[-1]
        return x / np.sqrt(mean_square + eps) * w

    def _attention(self, q: np.ndarray, at: np.ndarray, cache: HostCache) -> np.ndarray:
        """One query a row (q [B, 1, NH, D], RoPE applied, at position at [B]) over that row's
        cached keys [0, at]: [B, 1, NH D]."""
        B = q.shape[0]
        nh, nk, d = self.nh, self.nk, self.d
        S = int(at.max()) + 1
        keys = cache.k[:, :S].transpose(0, 2, 3, 1)  # [B, NK, D, S]
        values = cache.v[:, :S].transpose(0, 2, 1, 3)  # [B, NK, S, D]
        qg = q.reshape(B, nk, nh // nk, d)  # query head h reads key-value head h // (NH / NK)
        scores = (qg @ keys) * self.scale  # [B, NK, G, S]
        future = np.arange(S)[None, :] > at[:, None]  # [B, S] keys after the query
        scores = np.where(future[:, None, None], -np.inf, scores)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        return (probs @ values).reshape(B, 1, nh * d)

    def _tables(self, positions: int) -> None:
        """The RoPE tables [P, D/2] cover positions 0..positions-1 (grown by doubling)."""
        if positions > len(self._cos):
            angle = np.arange(2 * positions + 64)[:, None] * self.inv_freq
            self._cos, self._sin = (
                np.cos(angle).astype(np.float32),
                np.sin(angle).astype(np.float32),
            )

    def _rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """MLX's non-traditional RoPE (the halves rotate) at positions pos [B, W]."""
        self._tables(int(pos.max()) + 1)
        cos, sin = self._cos[pos][:, :, None], self._sin[pos][:, :, None]  # [B, W, 1, D/2]
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


class HostCache:
    """The head's KV cache: rows x slots, each row's committed entries a prefix of `length`."""

    def __init__(self, rows: int, nk: int, d: int, slots: int = 64) -> None:
        self.k = np.zeros((rows, slots, nk, d), dtype=np.float32)  # [B, S, NK, D]
        self.v = np.zeros_like(self.k)
        self.lengths = np.zeros(rows, dtype=np.int64)  # [B]

    def state_arrays(self) -> list[mx.array]:
        """The MLX arrays it holds, as BatchCache's (none: it lives on the host)."""
        return []

    @property
    def num_rows(self) -> int:
        return int(self.lengths.shape[0])

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        """Keys and values [B, W, NK, D] at each row's next W slots (not committed)."""
        B, W = k.shape[:2]
        self.reserve(W)
        slots = self.lengths[:, None] + np.arange(W)  # [B, W]
        rows = np.arange(B)[:, None]
        self.k[rows, slots], self.v[rows, slots] = k, v

    def reserve(self, W: int) -> None:
        """Room for W more entries a row (the slots grown by doubling; C-contiguous arrays)."""
        need = int(self.lengths.max(initial=0)) + W
        if need > self.k.shape[1]:
            grown = max(need, 2 * self.k.shape[1])
            pad = [(0, 0), (0, grown - self.k.shape[1]), (0, 0), (0, 0)]
            self.k, self.v = np.pad(self.k, pad), np.pad(self.v, pad)

    # BatchCache's drafter-cache operations (workers/kv_cache.py), so MTPDrafter's commit,
    # restart and tighten run on this cache unchanged.
    def rollback(self, num_drop: np.ndarray) -> None:
        """Forget the last num_drop[r] committed entries of each row (the chained drafts)."""
        d = np.asarray(num_drop, dtype=np.int64)
        assert d.shape == self.lengths.shape and (d >= 0).all() and (d <= self.lengths).all()
        self.lengths = self.lengths - d

    def reset_rows(self, rows: np.ndarray) -> None:
        """Empty the rows where `rows` [B] bool is set (a row restarting its head cache)."""
        self.lengths = np.where(rows, 0, self.lengths)

    def tighten(self, bounds: np.ndarray, rows: np.ndarray) -> None:
        """Nothing to narrow: the host's lengths are exact, never upper bounds."""

    def append(self, other: HostCache) -> None:
        S = max(self.k.shape[1], other.k.shape[1])
        pad = lambda a: np.pad(a, [(0, 0), (0, S - a.shape[1]), (0, 0), (0, 0)])  # noqa: E731
        self.k = np.concatenate([pad(self.k), pad(other.k)])
        self.v = np.concatenate([pad(self.v), pad(other.v)])
        self.lengths = np.concatenate([self.lengths, other.lengths])

    def keep_rows(self, idx: list[int]) -> None:
        self.k, self.v, self.lengths = self.k[idx], self.v[idx], self.lengths[idx]
