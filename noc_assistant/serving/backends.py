"""Which engine runs the default model: the native Q4_1 kernels or transformers.

:mod:`.loading` reads models for transformers and :mod:`.native` reads the GGUF as it is; this
module picks between them (``backend=`` or ``NOC_LLM_BACKEND``), so neither imports the other
both ways.
"""

from __future__ import annotations

import os

import torch

from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.loading import (
    DEFAULT_MODEL_NAME,
    TargetModel,
    convert_gguf,
    default_gguf_path,
    load_hf_dir,
    model_cache_dir,
    resolve_device,
)

__all__ = ["LLM_BACKENDS", "llm_backend", "load_default"]

#: the engines that can run the default model, the first the default on the CPU
LLM_BACKENDS = ("native", "transformers")


def llm_backend(backend: str | None = None) -> str:
    """The backend asked for: ``backend``, else ``NOC_LLM_BACKEND``, else ``native``.

    >>> llm_backend("transformers")
    'transformers'
    >>> llm_backend("onnx")
    Traceback (most recent call last):
    ...
    noc_assistant.serving.errors.ModelLoadError: unknown LLM backend 'onnx' (native, transformers)
    """
    name = (backend or os.environ.get("NOC_LLM_BACKEND") or LLM_BACKENDS[0]).strip().lower()
    if name not in LLM_BACKENDS:
        raise ModelLoadError(f"unknown LLM backend {name!r} ({', '.join(LLM_BACKENDS)})")
    return name


def load_default(
    *, n_taps: int = 3, device: str | torch.device = "cpu", backend: str | None = None
) -> TargetModel:
    """SmolLM2-135M-Instruct on the backend of :func:`llm_backend` (native on the CPU).

    The native backend reads the packaged GGUF directly (its tokeniser is cached under the
    model cache on first use); the transformers backend converts the GGUF to a bf16 folder on
    first use and loads that. A GPU ``device`` always uses transformers unless ``native`` was
    asked for explicitly, which is then an error (the native kernels are CPU-only).
    """
    name = llm_backend(backend)
    dev = resolve_device(device)
    if name == "native" and dev.type == "cpu":
        from noc_assistant.serving.native import gguf_tokenizer, load_native_gguf  # numba: lazily

        gguf = default_gguf_path()
        tok = gguf_tokenizer(gguf, model_cache_dir() / f"{DEFAULT_MODEL_NAME}-tokenizer")
        return load_native_gguf(gguf, name=DEFAULT_MODEL_NAME, n_taps=n_taps, tokenizer=tok)
    if name == "native" and (backend or os.environ.get("NOC_LLM_BACKEND")):
        raise ModelLoadError(f"the native LLM backend runs on the CPU only, not {dev}")
    out = model_cache_dir() / DEFAULT_MODEL_NAME
    if not (out / "config.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        convert_gguf(default_gguf_path(), out)
    return load_hf_dir(out, name=DEFAULT_MODEL_NAME, n_taps=n_taps, device=dev)
