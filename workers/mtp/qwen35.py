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

Hidden input: the target's last decoder-layer output BEFORE the target's final norm (DeepSeek-V3
eq. 21 defines h^0 as the main model's representation, and the MLX ports of Qwen3.5/DeepSeek MTP
feed the pre-norm hidden because `pre_fc_norm_hidden` normalises it anyway; vLLM hands over its
model output after the final norm, which only differs by that norm's per-channel scale).
`workers.mtp.hidden.target_hidden_and_logits` returns exactly this tensor.

Positions and pairing: MTP position t processes the pair (h_t, x_{t+1}) and predicts x_{t+2}.
Its KV cache therefore holds one entry per target position whose next token is known: after
the target has committed tokens x_0..x_n, the MTP cache holds entries 0..n-1 (one fewer than
the target's cache). RoPE uses `cache.offset`, i.e. MTP entry t sits at position t.

Drafting k tokens per round (chaining, as DeepSeek-V3 / vLLM do with a single MTP layer):
    depth 1: (h_n,      x_{n+1})  -> g_1, logits -> d_1 = argmax   (x_{n+1}: the last committed
                                                                   token, i.e. the bonus token)
    depth j: (g_{j-1},  d_{j-1})  -> g_j, logits -> d_j            (g: this head's PRE-norm output)
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


@dataclass
class MTPArgs:
    """Shape of one MTP head; built from the target's config.json by `from_target_config`."""

    model_type: str  # target family: picks the decoder-layer class ("qwen3", "qwen3_5", ...)
    hidden_size: int
    num_layers: int  # config key `mtp_num_hidden_layers`
    rms_norm_eps: float
    layer_config: dict[str, Any]  # the (text) config used to build the decoder layer

    def __post_init__(self) -> None:
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
        )


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
        hidden: mx.array,  # [B, L, H] target pre-norm hidden (or this head's previous output)
        next_embeds: mx.array,  # [B, L, H] embed(x_{t+1}) from the target's embedding
        mask: mx.array | str | None = None,
        cache: Any | None = None,  # the mlx-lm cache duck-type of layer `step_idx`
        step_idx: int = 0,
    ) -> tuple[mx.array, mx.array]:
        """Returns (pre_norm [B, L, H] for chaining, normed [B, L, H] for the lm_head)."""
        e = self.pre_fc_norm_embedding(next_embeds)
        h = self.pre_fc_norm_hidden(hidden)
        x = self.fc(mx.concatenate([e, h], axis=-1))
        if mask is None:
            mask = create_attention_mask(x, cache)
        layer = self.layers[step_idx % len(self.layers)]
        out = layer(x, mask, cache)
        return out, self.norm(out)

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
