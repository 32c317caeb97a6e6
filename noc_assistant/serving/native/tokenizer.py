"""Tokenisers of the native engine: the one stored in a GGUF file, and a saved fast one."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.loading import HFTokenizer, TextTokenizer

__all__ = ["FastTokenizer", "gguf_tokenizer"]


class FastTokenizer:
    """A saved Hugging Face fast tokeniser driven without transformers.

    Loading transformers for its tokeniser costs ~85 MB of resident memory and over a second
    of start-up, as much as the model's packed weights; the ids come from the Rust
    ``tokenizers`` library either way. The chat template is rendered as transformers renders it
    (sandboxed jinja2, ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, its ``tojson``) and
    the result encoded without added special tokens, so ``chat_prompt``, ``encode``, ``decode``
    and ``eos_token_ids`` equal :class:`HFTokenizer`'s on the same folder.
    """

    def __init__(self, folder: Path) -> None:
        import jinja2
        import tokenizers
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        try:
            cfg = json.loads((folder / "tokenizer_config.json").read_text())
            self._tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            tpl = folder / "chat_template.jinja"
            template = tpl.read_text() if tpl.is_file() else cfg.get("chat_template")
        except Exception as exc:  # tokenizers raises plain Exception on a bad file
            raise ModelLoadError(f"cannot load the tokeniser in {folder}: {exc}") from exc
        if not isinstance(template, str) or not template:
            raise ModelLoadError(f"the tokeniser in {folder} has no chat template")
        self._specials: dict[str, str] = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            v = cfg.get(key)
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str):
                self._specials[key] = v

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(
            x: Any,
            ensure_ascii: bool = False,
            indent: int | None = None,
            separators: Any = None,
            sort_keys: bool = False,
        ) -> str:
            return json.dumps(
                x,
                ensure_ascii=ensure_ascii,
                indent=indent,
                separators=separators,
                sort_keys=sort_keys,
            )

        def strftime_now(fmt: str) -> str:
            return datetime.now().strftime(fmt)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        self._template = env.from_string(template)

    def _id(self, token: str | None) -> int | None:
        if token is None:
            return None
        tid = self._tok.token_to_id(token)
        return None if tid is None else int(tid)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        eos = self._id(self._specials.get("eos_token"))
        if eos is not None:
            ids.add(eos)
        unk = self._id(self._specials.get("unk_token"))
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = self._id(name)
            if tid is not None and tid != unk:
                ids.add(tid)
        return frozenset(ids)

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` itself (structured decoding builds its vocabulary
        from it: :func:`noc_assistant.serving.grammar.ll_tokenizer`)."""
        return self._tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = self._template.render(
            messages=[dict(m) for m in messages],
            tools=None,
            documents=None,
            add_generation_prompt=True,
            **self._specials,
        )
        return self.encode(text)


def gguf_tokenizer(path: Path, cache_dir: Path | None = None) -> TextTokenizer:
    """The tokeniser stored in a GGUF file.

    Building it from GGUF metadata goes through transformers (seconds, and ~150 MB for the
    metadata arrays); with ``cache_dir`` that happens once, the result is saved there and later
    loads are a :class:`FastTokenizer` over the saved files. Without ``cache_dir`` the
    transformers tokeniser is returned.
    """
    from noc_assistant.serving.loading import _offline

    if cache_dir is not None and (cache_dir / "tokenizer.json").is_file():
        return FastTokenizer(cache_dir)
    _offline()
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the tokeniser of {path}: {exc}") from exc
    if cache_dir is None:
        return HFTokenizer(tok)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir.with_name(cache_dir.name + f".tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    with contextlib.suppress(OSError):  # another process got there first
        tmp.rename(cache_dir)
    return FastTokenizer(cache_dir)
