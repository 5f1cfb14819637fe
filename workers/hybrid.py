"""Recurrent (GatedDeltaNet) layers in a ragged speculative batch: per-row state rollback.

A recurrent state cannot be trimmed: after a verify window of W tokens it has absorbed all W,
but row r keeps only its first n_r. So during a window of at most MAX_STATE_WINDOW tokens the
layer keeps the state after *every* window position, and `commit(n)` picks each row's state
after its own n_r-th token (what mlx-vlm does for hybrid layers, with per-row counts and no
clamp to the batch minimum). Longer windows (prefill chunks) keep only the state after each
row's last valid token: masked positions leave the state untouched, as in mlx-lm.

`RaggedGDN` wraps an mlx-lm (0.32) `GatedDeltaNet` and recomputes its forward with the same
ops, in the same order, so a row's numbers match mlx-lm's own CPU path exactly; with any other
cache it defers to the wrapped layer, so the model still works with mlx-lm's caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from workers.cache_types import CacheOwner, concat_rows
from workers.gdn_recurrence import Recurrence, kernel_inputs, window_recurrence

MAX_STATE_WINDOW = 17  # a verify window: up to 16 drafts + the last committed token


class RaggedStateCache:
    """Conv and recurrent state of one GatedDeltaNet layer for every row of a batch."""

    def __init__(self, owner: CacheOwner):
        self.owner = owner
        self.conv: mx.array | None = None  # [B, kernel-1, C] last conv inputs per row
        self.state: mx.array | None = None  # [B, Hv, Dv, Dk] recurrent state per row
        # Staged by the last window, chosen from by on_commit():
        self._conv_input: mx.array | None = None  # [B, kernel-1+W, C] old conv + window inputs
        self._states: list[mx.array] | None = None  # W of [B, Hv, Dv, Dk], or [final] only
        self._state_before: mx.array | None = None  # [B, Hv, Dv, Dk]
        self._all_states = True
        self._kernel = 0
        self._rerun: Rerun | None = None  # a fused window: recompute the kept prefix's state

    def make_mask(self, N: int, **_: object) -> mx.array:
        valid = self.owner.window_valid_mx
        return mx.arange(N)[None, :] < valid[:, None]  # [B, N]

    def stage(
        self,
        conv_input: mx.array,
        kernel: int,
        before: mx.array,
        states: list[mx.array],
        all_states: bool,
        rerun: Rerun | None = None,
    ) -> None:
        self._conv_input, self._kernel, self._state_before = conv_input, kernel, before
        self._states, self._all_states = states, all_states
        self._rerun = rerun

    def on_commit(self, n: np.ndarray | mx.array, whole: bool = False) -> None:
        """Row r keeps the first n[r] tokens of the staged window (n[r] may be 0). n may still
        be on the device (a pipelined round) for windows that kept every position's state.
        `whole`: every row keeps the whole window (a plain decode step), so the state after it
        is the last one staged and the conv history the window's tail: no gathers."""
        if self._conv_input is None or self._states is None or self._state_before is None:
            return
        W = self._conv_input.shape[1] - self._kernel
        if whole or (isinstance(n, np.ndarray) and bool((n == W).all())):
            self.conv, self.state = self._conv_input[:, W:], self._states[-1]
            self._conv_input = self._states = self._state_before = self._rerun = None
            return
        if isinstance(n, mx.array):
            assert self._all_states or self._rerun, "long windows commit with host counts"
        owner = self.owner
        # Built once per commit for every recurrent layer (BatchCache.shared).
        n_mx = owner.shared(("n",), lambda: _int32(n))  # [B]
        # After n tokens the conv history is conv_input[n : n + kernel-1] (n = 0: unchanged).
        idx = owner.shared(
            ("conv", self._kernel), lambda: (n_mx[:, None] + mx.arange(self._kernel))[..., None]
        )  # [B, kernel-1, 1]
        self.conv = mx.take_along_axis(self._conv_input, idx, axis=1)
        if (rerun := self._rerun) is not None:  # a fused verify window: rerun the kept prefix
            keep = owner.shared(("keep", W), lambda: rerun.keep(n_mx))
            self.state = rerun.state_after(self._state_before, keep)
            self._conv_input = self._states = self._state_before = self._rerun = None
            return
        if self._all_states:
            pick = owner.shared(
                ("pick",), lambda: mx.maximum(n_mx - 1, 0)[:, None, None, None, None]
            )
        else:
            valid = owner.window_valid
            assert isinstance(n, np.ndarray) and ((n == 0) | (n == valid)).all(), (
                "long windows commit whole rows only"
            )
            pick = mx.zeros((n_mx.shape[0], 1, 1, 1, 1), dtype=mx.int32)
        states = mx.stack(self._states, axis=1)  # [B, W or 1, Hv, Dv, Dk]
        after = mx.take_along_axis(states, pick, axis=1)[:, 0]
        kept = owner.shared(("kept",), lambda: (n_mx > 0)[:, None, None, None])
        self.state = mx.where(kept, after, self._state_before)
        self._conv_input = self._states = self._state_before = None

    def take_rows(self, rows: mx.array, max_len: int) -> None:
        if self.conv is not None and self.state is not None:
            self.conv, self.state = self.conv[rows], self.state[rows]

    def row_parts(self) -> list[mx.array]:
        return []  # exactly the batch's rows: a recurrent state is one small array a row

    def place_rows(
        self, dest: list[int], moved: list[mx.array], rows: mx.array, max_len: int
    ) -> None:
        self.take_rows(rows, max_len)

    def append_rows(
        self, other: RaggedStateCache, num_self: int, num_other: int, capacity: int = 0
    ) -> None:  # exactly the batch's rows: a recurrent state is one small array a row
        self.conv = concat_rows(self.conv, other.conv, num_self, num_other)
        self.state = concat_rows(self.state, other.state, num_self, num_other)

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.conv, self.state) if a is not None]


@dataclass
class Rerun:
    """A verify window run by a fused kernel (final state only): at commit, the state after
    each row's kept prefix is the same kernel run again from the state before the window, with
    positions past the prefix masked (they leave the state as it is)."""

    recurrence: Recurrence
    inputs: tuple[mx.array, ...]  # q, k [B, W, Hk, Dk], v [B, W, Hv, Dv], g, beta [B, W, Hv]
    valid: mx.array  # [B, W] bool: the window's real (unpadded) tokens

    def keep(self, n: mx.array) -> mx.array:
        """[B, W] bool: the positions row r keeps, its first n[r] real tokens (the mask of the
        rerun; the same for every layer of the window)."""
        W = self.valid.shape[1]
        return (mx.arange(W)[None, :] < n[:, None]) & self.valid

    def state_after(self, before: mx.array, keep: mx.array) -> mx.array:
        return self.recurrence(*self.inputs, before, keep)[1]


class RaggedGDN(nn.Module):
    """mlx-lm's GatedDeltaNet forward, keeping the per-position states of short windows."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def __call__(self, inputs: mx.array, mask: mx.array | None = None, cache=None) -> mx.array:
        if not isinstance(cache, RaggedStateCache):
            return self.inner(inputs, mask, cache)
        from mlx_lm.models.gated_delta import _gated_delta_step_ops, compute_g, normalize_qk

        g = self.inner
        B, S, _ = inputs.shape
        qkv = g.in_proj_qkv(inputs)  # [B, S, C]
        z = g.in_proj_z(inputs).reshape(B, S, g.num_v_heads, g.head_v_dim)
        b, a = g.in_proj_b(inputs), g.in_proj_a(inputs)
        kernel = g.conv_kernel_size - 1
        conv_state = (
            cache.conv
            if cache.conv is not None
            else mx.zeros((B, kernel, g.conv_dim), inputs.dtype)
        )
        if mask is not None:
            qkv = mx.where(mask[..., None], qkv, 0)
        conv_input = mx.concatenate([conv_state, qkv], axis=1)  # [B, kernel-1+S, C]
        conv_out = nn.silu(g.conv1d(conv_input))
        q, k, v = [
            t.reshape(B, S, h, d)
            for t, h, d in zip(
                mx.split(conv_out, [g.key_dim, 2 * g.key_dim], -1),
                [g.num_k_heads, g.num_k_heads, g.num_v_heads],
                [g.head_k_dim, g.head_k_dim, g.head_v_dim],
            )
        ]
        q, k = normalize_qk(q, k, inv_scale=g.head_k_dim**-0.5, eps=1e-6)
        beta, decay = mx.sigmoid(b), compute_g(g.A_log, a, g.dt_bias)
        state = cache.state
        if state is None:
            state = mx.zeros((B, g.num_v_heads, g.head_v_dim, g.head_k_dim), dtype=mx.float32)
        keep_all = S <= MAX_STATE_WINDOW
        fused = window_recurrence(g.head_k_dim)
        if fused is not None:  # one kernel per window (workers/gdn_recurrence.py)
            valid = mx.ones((B, S), dtype=mx.bool_) if mask is None else mask
            window_in = kernel_inputs(fused, q, k, v, decay, beta)  # cast once for both calls
            y, final = fused(*window_in, state, valid)
            # One position: its final state is every position's. Up to a verify window: rerun
            # the kept prefix at commit. Longer (prefill chunks): rows commit whole.
            rerun = Rerun(fused, window_in, valid) if keep_all and S > 1 else None
            cache.stage(conv_input, kernel, state, [final], S == 1, rerun)
            return g.out_proj(g.norm(y, z).reshape(B, S, -1))
        if (rep := g.num_v_heads // g.num_k_heads) > 1:
            q, k = mx.repeat(q, rep, -2), mx.repeat(k, rep, -2)
        before, ys, states = state, [], []
        for t in range(S):
            step_mask = None if mask is None else mask[:, t]
            y, state = _gated_delta_step_ops(
                q[:, t], k[:, t], v[:, t], decay[:, t], beta[:, t], state, step_mask
            )
            ys.append(y)
            if keep_all:
                states.append(state)
        # Masked (padding) positions leave the state as it was, so in final-only mode the
        # last state is each row's state after its last valid token.
        cache.stage(conv_input, kernel, before, states if keep_all else [state], keep_all)
        out = g.norm(mx.stack(ys, axis=1), z)
        return g.out_proj(out.reshape(B, S, -1))


def _int32(n: np.ndarray | mx.array) -> mx.array:
    return n.astype(mx.int32) if isinstance(n, mx.array) else mx.array(n.astype(np.int32))


def install(model: object) -> list[bool]:
    """Wrap every GatedDeltaNet layer; returns which layers are recurrent."""
    recurrent = []
    for layer in model.layers:  # type: ignore[attr-defined]
        inner = getattr(layer, "linear_attn", None)
        if inner is not None and getattr(layer, "is_linear", False):
            if not isinstance(inner, RaggedGDN):
                layer.linear_attn = RaggedGDN(inner)
            recurrent.append(True)
        else:
            recurrent.append(False)
    return recurrent
