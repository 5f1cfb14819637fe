"""The scheduler's tokenizer: `tokenizers` + jinja2 only (mlx-lm's TokenizerWrapper imports mlx,
which the cluster must never load).

Text prompts are encoded without added special tokens, exactly as `workers.Engine` encodes a
text prompt, so a text request through the cluster equals the same text given to the engine.
Output is detokenized incrementally: each delta is the text that the new tokens add once it is
stable (no trailing partial UTF-8 sequence), and the deltas concatenate to `decode(all)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

# Used when tokenizer_config.json has no chat template (tiny test models): plain role lines.
_FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class TextTokenizer:
    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.exists():
            raise ValueError(
                f"tokenizer path {path!s} has no tokenizer.json: pass the model directory "
                "(the one the workers load) or the tokenizer.json file itself"
            )
        self._tok = Tokenizer.from_file(str(file))
        config: dict[str, Any] = {}
        cfg_file = file.parent / "tokenizer_config.json"
        if cfg_file.exists():
            config = json.loads(cfg_file.read_text())
        self.chat_template: str = config.get("chat_template") or _FALLBACK_TEMPLATE
        if isinstance(self.chat_template, list):  # some configs hold named templates
            self.chat_template = next(
                (t["template"] for t in self.chat_template if t.get("name") == "default"),
                _FALLBACK_TEMPLATE,
            )
        self.special: dict[str, str] = {
            k: _token_text(config.get(k)) for k in ("bos_token", "eos_token") if config.get(k)
        }
        eos = self.special.get("eos_token")
        eos_id = self._tok.token_to_id(eos) if eos else None
        self.eos_token_ids: list[int] = [] if eos_id is None else [eos_id]
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))

    def apply_chat_template(
        self, messages: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(msg: str) -> None:
            raise ValueError(f"chat template refused the messages: {msg}")

        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special
        )

    def detokenizer(self) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self)


def _token_text(value: object) -> str:
    if isinstance(value, dict):  # {"content": "</s>", ...} in older configs
        return str(value.get("content", ""))
    return str(value)


class IncrementalDetokenizer:
    """Stable text deltas from a growing token list, decoding a short window each time.

    Keeps two offsets into the ids: text is decoded from `prefix` (one step of left context, so
    tokenizers that drop or add a leading space at a sequence start decode correctly) and the
    part after `read` is new. A delta that ends in U+FFFD is a partial UTF-8 character: hold it
    until the next token completes it.
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0

    def push(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        before = self.tok.decode(self.ids[self.prefix : self.read])
        now = self.tok.decode(self.ids[self.prefix :])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return now[len(before) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (a trailing partial character), at the end."""
        before = self.tok.decode(self.ids[self.prefix : self.read])
        now = self.tok.decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return now[len(before) :]
