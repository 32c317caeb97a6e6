"""The native model as a :class:`~noc_assistant.serving.loading.TargetModel`, and its loader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.loading import (
    TargetModel,
    TargetOutput,
    TextTokenizer,
    build_target_layer_ids,
    use_grouped_attention,
    use_row_major_linears,
)
from noc_assistant.serving.native.kv_cache import StaticKVCache
from noc_assistant.serving.native.model import NativeLlama
from noc_assistant.serving.native.tokenizer import gguf_tokenizer
from noc_assistant.serving.native.weights import dequantize_matrix

__all__ = ["NativeTargetModel", "load_native_gguf"]


class _LazyHFModel:
    """What ``TargetModel.model`` offers, without holding a transformers model in memory.

    Drafters read the embedding through ``get_input_embeddings()``; the fp32 embedding is
    dequantised on first use (and is the LM head too when tied). Everything else (``generate``,
    ``__call__`` for ``features_batch``, ``state_dict``...) goes to the fp32 transformers model
    of the same GGUF, loaded on first use: the reference the native forward is tested against.
    """

    def __init__(self, native: NativeLlama) -> None:
        self._native = native
        self._config: Any = None
        self._hf: Any = None
        self._emb: Any = None
        self._head: Any = None

    @property
    def config(self) -> Any:
        if self._config is None:
            self._config = self._native.hf_config()
        return self._config

    def get_input_embeddings(self) -> torch.nn.Embedding:
        if self._emb is None:
            w = torch.from_numpy(dequantize_matrix(self._native.embedding))
            self._emb = torch.nn.Embedding.from_pretrained(w, freeze=True)  # type: ignore[no-untyped-call]
        emb: torch.nn.Embedding = self._emb
        return emb

    def get_output_embeddings(self) -> torch.nn.Module:
        if self._head is None:
            if self._native.tied:
                w = self.get_input_embeddings().weight
            else:
                w = torch.from_numpy(dequantize_matrix(self._native.head))
            lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
            lin.weight = torch.nn.Parameter(w, requires_grad=False)
            self._head = lin
        head: torch.nn.Module = self._head
        return head

    @property
    def hf(self) -> Any:
        """The transformers model of the same file (fp32, loaded on first use)."""
        if self._hf is None:
            from noc_assistant.serving.loading import _offline

            _offline()
            from transformers import AutoModelForCausalLM

            p = self._native.path
            try:
                m = AutoModelForCausalLM.from_pretrained(
                    p.parent, gguf_file=p.name, dtype=torch.float32
                )
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot load {p} through transformers: {exc}") from exc
            m.eval()  # type: ignore[no-untyped-call]
            use_row_major_linears(m)  # as TargetModel does on the CPU
            use_grouped_attention(m)
            self._hf = m
        return self._hf

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.hf(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.hf, name)


class NativeTargetModel(TargetModel):
    """A :class:`TargetModel` whose ``forward`` is the native kernels' (CPU, fp32 activations).

    ``model`` is a stand-in (:class:`_LazyHFModel`): its embeddings come from the packed
    weights; training helpers that need a real transformers model get one on first use.
    """

    def __init__(
        self,
        native: NativeLlama,
        tokenizer: TextTokenizer,
        name: str,
        n_taps: int = 3,
    ) -> None:
        s = native.spec
        self.native = native
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.model = _LazyHFModel(native)
        self.tokenizer = tokenizer
        self.name = name
        self.hidden_size = s.hidden
        self.num_layers = s.n_layers
        self.num_heads = s.n_heads
        self.num_kv_heads = s.n_kv_heads
        self.vocab_size = s.vocab
        self.max_positions = s.max_positions
        self.tap_layers = build_target_layer_ids(s.n_layers, n_taps)
        self._taps = np.array(self.tap_layers, np.int64)

    def embed(self, ids: Tensor) -> Tensor:
        flat = ids.reshape(-1).to(torch.int64).numpy()
        out = torch.from_numpy(self.native.embed(np.ascontiguousarray(flat)))
        return out.reshape(*ids.shape, self.hidden_size)

    @property
    def lm_head_weight(self) -> Tensor:
        w: Tensor = self.model.get_output_embeddings().weight
        return w

    def new_cache(self) -> StaticKVCache:
        return self.native.new_cache()

    @torch.inference_mode()
    def forward(
        self, ids: Sequence[int] | Tensor, cache: KVCache, *, all_logits: bool = True
    ) -> TargetOutput:
        """Run ``ids`` after the ``cache.length`` tokens already cached; the cache grows.

        ``all_logits=False`` returns the last token's logits only ([1, V]): a prompt's prefill
        needs no more, and the LM head is then computed for one row instead of T.
        """
        arr, cache = _native_args(ids, cache)
        logits, feats = self.native.forward(arr, cache, self._taps, all_logits=all_logits)
        return TargetOutput(logits=torch.from_numpy(logits), features=torch.from_numpy(feats))

    shares_forwards = True

    @torch.inference_mode()
    def forward_many(
        self, calls: Sequence[tuple[Sequence[int] | Tensor, KVCache]]
    ) -> list[TargetOutput]:
        """The forwards of several sequences in one kernel call (rows bit-identical to
        :meth:`forward` of each alone; see ``NativeLlama.forward_many``)."""
        outs = self.native.forward_many([_native_args(i, c) for i, c in calls], self._taps)
        return [
            TargetOutput(logits=torch.from_numpy(lg), features=torch.from_numpy(ft))
            for lg, ft in outs
        ]


def _native_args(
    ids: Sequence[int] | Tensor, cache: KVCache
) -> tuple[npt.NDArray[np.int64], StaticKVCache]:
    """Token ids as the kernels take them, and the cache, which must be a native one."""
    if not isinstance(cache, StaticKVCache):
        raise TypeError("a native target needs the cache of its own new_cache()")
    arr = torch.as_tensor(ids, dtype=torch.long).reshape(-1).numpy()
    return np.ascontiguousarray(arr, dtype=np.int64), cache


def load_native_gguf(
    path: str | Path,
    *,
    name: str | None = None,
    n_taps: int = 3,
    tokenizer: TextTokenizer | None = None,
) -> NativeTargetModel:
    """Load a Llama GGUF for the native forward; the tokeniser is read from the file unless
    one is given (tokenisers are slow to build from GGUF metadata: callers may cache one)."""
    p = Path(path)
    native = NativeLlama(p)
    if tokenizer is None:
        tokenizer = gguf_tokenizer(p)
    return NativeTargetModel(native, tokenizer, name or p.stem, n_taps=n_taps)
