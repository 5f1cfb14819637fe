"""Multi-token-prediction (MTP) head in the Hugging Face Qwen3.5 / Qwen3-Next layout.

Weights (prefix `mtp.` in the checkpoint, stripped here):
    pre_fc_norm_hidden.weight     [H]      RMSNorm on the target hidden h_t
    pre_fc_norm_embedding.weight  [H]      RMSNorm on embed(x_{t+1}) (shared target embedding)
    fc.weight                     [H, 2H]  projection of concat(norm_e(e), norm_h(h))
    layers.{i}.*                           one decoder layer of the target's family
    norm.weight                   [H]      final RMSNorm; its output feeds the target's lm_head

Concat order: embedding first, hidden second, as vLLM's `Qwen3NextMultiTokenPredictor.forward`
does (`torch.cat([inputs_embeds, hidden_states], dim=-1)`), and as DeepSeek-V3 eq. 21
(`M_k [RMSNorm(Emb(t_{i+k})); RMSNorm(h_i^{k-1})]`).

Hidden convention (`MTPArgs.hidden_norm`, config.json key `specfleet_mtp_hidden`), one setting
for both hidden inputs: the target's hidden h_t and the chained hidden g_j of depth j > 1.
    "post_norm" (default when the key is absent): h_t AFTER the target's final norm (the tensor
        its lm_head reads) and g_j AFTER `mtp.norm`. This is what real Qwen3.5 / Qwen3-Next MTP
        heads get from the engines built with them (checked in source, 2026-11):
        vLLM `models/qwen3_next.py` Qwen3NextModel.forward ends `hidden_states, _ =
        self.norm(hidden_states, residual)` and `compute_logits` applies lm_head with no norm,
        the runner hands that output to the proposer (`target_hidden_states =
        hidden_states[:num_scheduled_tokens]`); `models/qwen3_next_mtp.py`
        Qwen3NextMultiTokenPredictor.forward also ends in `self.norm(...)`, and the proposer
        (`v1/spec_decode/llm_base_proposer.py` propose) chains that same tensor
        (`hidden_states = last_hidden_states` for single-output models). SGLang
        `models/qwen3_next_mtp.py` feeds `spec_info.hidden_states`, which its LogitsProcessor
        stores as the lm_head input. mlx-vlm 0.7.10: `models/qwen3_5/language.py:1406`
        `return self.norm(h)` and `:1844` `hidden_sink.append(out)` (verify path:
        `speculative_verifier.py:376,406`); `speculative/drafters/qwen3_5_mtp/qwen3_5_mtp.py:179`
        `_forward_hidden` returns `self.norm(h)` and `:430` chains it (`h_prev = ...`).
        (DeepSeek-V3 differs in vLLM `deepseek_mtp.py`: the target hidden is post-norm too, but
        the chained hidden is the layer output before `shared_head.norm`.)
    "pre_norm": h_t BEFORE the target's final norm and g_j BEFORE `mtp.norm`; the convention
        specfleet's own default model was trained with (train/mtp_chain.py), whose config.json
        says so. With a unit final-norm weight the two agree for h_t up to eps (the head's
        `pre_fc_norm_hidden` renormalises), but real checkpoints have non-unit weights.
`workers.mtp.hidden.target_hidden_and_logits(post_norm=...)` returns either tensor.

Positions and pairing: MTP position t processes the pair (h_t, x_{t+1}) and predicts x_{t+2}.
Its KV cache therefore holds one entry per target position whose next token is known: after
the target has committed tokens x_0..x_n, the MTP cache holds entries 0..n-1 (one fewer than
the target's cache). RoPE uses `cache.offset`, i.e. MTP entry t sits at position t.

Drafting k tokens per round (chaining, as DeepSeek-V3 / vLLM do with a single MTP layer):
    depth 1: (h_n,      x_{n+1})  -> g_1, logits -> d_1 = argmax   (x_{n+1}: the last committed
                                                                   token, i.e. the bonus token)
    depth j: (g_{j-1},  d_{j-1})  -> g_j, logits -> d_j   (g: this head's output, per hidden_norm)
Each depth appends one MTP cache entry; after verify the caller trims the MTP cache to the
committed prefix and re-feeds the accepted tokens' true target hiddens (they replace the
chained g's). Step j uses `layers[(j - 1) % num_layers]` (vLLM's spec_step_idx rule), so a
checkpoint with one MTP layer reuses it at every depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask

# Target families whose HF checkpoints store RMSNorm weights as (w - 1) ("1 + w" Gemma-style
# norms); mlx-lm adds 1.0 when it loads their backbone, so the MTP norms need the same shift.
SHIFTED_NORM_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_next"})

# config.json key naming the hidden convention (see the module docstring) and its values.
HIDDEN_NORM_KEY = "specfleet_mtp_hidden"
HIDDEN_NORMS = ("post_norm", "pre_norm")
DEFAULT_HIDDEN_NORM = "post_norm"  # what Qwen3.5 / Qwen3-Next heads see in vLLM, SGLang, mlx-vlm


@dataclass
class MTPArgs:
    """Shape of one MTP head; built from the target's config.json by `from_target_config`."""

    model_type: str  # target family: picks the decoder-layer class ("qwen3", "qwen3_5", ...)
    hidden_size: int
    num_layers: int  # config key `mtp_num_hidden_layers`
    rms_norm_eps: float
    layer_config: dict[str, Any]  # the (text) config used to build the decoder layer
    hidden_norm: str = DEFAULT_HIDDEN_NORM  # config key `specfleet_mtp_hidden`

    def __post_init__(self) -> None:
        if self.hidden_norm not in HIDDEN_NORMS:
            raise ValueError(
                f"config.json has {HIDDEN_NORM_KEY}={self.hidden_norm!r}; use 'post_norm' (the "
                "target's hidden after its final norm and the head's output after mtp.norm, as "
                "Qwen3.5 / Qwen3-Next MTP heads are trained; the default when the key is absent) "
                "or 'pre_norm' (both before those norms, as specfleet's default model is trained)"
            )
        if self.hidden_size <= 0:
            raise ValueError(f"MTP hidden_size must be positive, got {self.hidden_size}")
        if self.num_layers <= 0:
            raise ValueError(
                f"mtp_num_hidden_layers must be >= 1, got {self.num_layers}; "
                "a target without MTP layers cannot use the MTP drafter"
            )

    @classmethod
    def from_target_config(cls, config: dict[str, Any]) -> MTPArgs:
        text = config.get("text_config", config)  # qwen3_5 nests the LM config
        model_type = str(config.get("model_type", text.get("model_type", "")))
        n = text.get("mtp_num_hidden_layers", config.get("mtp_num_hidden_layers"))
        if n is None:
            raise ValueError(
                "config.json has no `mtp_num_hidden_layers`; this checkpoint has no MTP head "
                "(use a drafter such as 'model:PATH' or 'ngram' instead)"
            )
        return cls(
            model_type=model_type,
            hidden_size=int(text["hidden_size"]),
            num_layers=int(n),
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            layer_config=dict(text),
            hidden_norm=text.get(HIDDEN_NORM_KEY, config.get(HIDDEN_NORM_KEY, DEFAULT_HIDDEN_NORM)),
        )

    @property
    def post_norm(self) -> bool:
        """True when the head reads post-final-norm hiddens (see the module docstring)."""
        return self.hidden_norm == "post_norm"


def make_decoder_layer(args: MTPArgs) -> nn.Module:
    """One full-attention decoder layer of the target's family (module names = HF names)."""
    cfg = dict(args.layer_config)
    if args.model_type in ("qwen3_5", "qwen3_5_moe"):
        from mlx_lm.models import qwen3_5

        text_args = qwen3_5.TextModelArgs.from_dict(cfg)
        # layer_idx = interval - 1 makes `is_linear` False: the MTP layer is full attention.
        return qwen3_5.DecoderLayer(text_args, layer_idx=text_args.full_attention_interval - 1)
    if args.model_type == "qwen3_next":
        from mlx_lm.models import qwen3_next

        next_args = qwen3_next.ModelArgs.from_dict(cfg)
        return qwen3_next.Qwen3NextDecoderLayer(
            next_args, layer_idx=next_args.full_attention_interval - 1
        )
    if args.model_type == "qwen3":
        from mlx_lm.models import qwen3

        return qwen3.TransformerBlock(qwen3.ModelArgs.from_dict(cfg))
    raise ValueError(
        f"no Qwen3.5-layout MTP layer for target model_type {args.model_type!r}; "
        "supported: qwen3, qwen3_5, qwen3_5_moe, qwen3_next"
    )


class MTPHead(nn.Module):
    """The MTP module; parameter names match the checkpoint keys after stripping `mtp.`."""

    def __init__(self, args: MTPArgs):
        super().__init__()
        self.args = args
        H = args.hidden_size
        self.pre_fc_norm_hidden = nn.RMSNorm(H, eps=args.rms_norm_eps)
        self.pre_fc_norm_embedding = nn.RMSNorm(H, eps=args.rms_norm_eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layers = [make_decoder_layer(args) for _ in range(args.num_layers)]
        self.norm = nn.RMSNorm(H, eps=args.rms_norm_eps)

    def make_cache(self) -> list[Any]:
        """One single-row mlx-lm KVCache per MTP layer (the engine brings its own batch cache)."""
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in self.layers]

    def step(
        self,
        hidden: mx.array,  # [B, L, H] target hidden (or the chained g), per args.hidden_norm
        next_embeds: mx.array,  # [B, L, H] embed(x_{t+1}) from the target's embedding
        mask: mx.array | str | None = None,
        cache: Any | None = None,  # the mlx-lm cache duck-type of layer `step_idx`
        step_idx: int = 0,
    ) -> tuple[mx.array, mx.array]:
        """Returns (g [B, L, H] to chain into the next depth, normed [B, L, H] for the lm_head).

        g is the layer output before `mtp.norm` for 'pre_norm' heads, `normed` for 'post_norm'.
        """
        e = self.pre_fc_norm_embedding(next_embeds)
        h = self.pre_fc_norm_hidden(hidden)
        x = self.fc(mx.concatenate([e, h], axis=-1))
        if mask is None:
            mask = create_attention_mask(x, cache)
        layer = self.layers[step_idx % len(self.layers)]
        out = layer(x, mask, cache)
        normed = self.norm(out)
        return (normed if self.args.post_norm else out), normed

    def __call__(
        self,
        hidden: mx.array,
        next_embeds: mx.array,
        mask: mx.array | str | None = None,
        cache: Any | None = None,
        step_idx: int = 0,
    ) -> mx.array:
        """Post-`mtp.norm` hidden [B, L, H], ready for the target's (shared) lm_head."""
        return self.step(hidden, next_embeds, mask, cache, step_idx)[1]
