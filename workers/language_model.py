"""A language model as the engine calls it: the target, and a draft model (ModelDrafter). Both
are mlx-lm `Model`s (llama, qwen2/3, mistral, gemma3, qwen3_5 / qwen3_next hybrids, ...), or
anything with the same call.

The engine calls them only through workers/forward.py. Besides the call, it reads (with getattr,
so a model without them still loads) `args.vocab_size` / `args.max_position_embeddings`,
`model.embed_tokens` (vocabulary size when `args` has none), `make_cache()` and the layers'
kinds (workers/kv_cache.py `layer_kinds`), and the backbone that workers/mtp/hidden.py walks for
an MTP drafter's hidden states.
"""

from __future__ import annotations

from typing import Any, Protocol

import mlx.core as mx


class LanguageModel(Protocol):
    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        """inputs [B, W] int32 at each row's next positions -> logits [B, W, V].

        cache: one cache object per layer (mlx-lm's, or the engine's ragged batch cache,
        workers/kv_cache.py `BatchCache.layers`), updated in place with the window's keys."""
        ...
