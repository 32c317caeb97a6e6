"""Native CPU forward for Llama-family GGUF models: packaged quantised weights, numba kernels.

The transformers path dequantises the packaged Q4_1 model to fp32 (~540 MB streamed per token)
and runs ~20 small torch ops per layer plus a ``DynamicCache`` concatenation per token. Here
the GGUF tensors stay in the precision the file ships (Q4_1 blocks: 4-bit codes with an fp16
scale ``d`` and minimum ``m`` per 32 weights; Q8_0: 8-bit codes with an fp16 scale; F32 norms;
any other type is dequantised to fp32 at load) and a decoding step or verify round (every
layer, the final norm and the LM head) is one call of one compiled numba function over a
preallocated KV cache. Prompts of ``PREFILL_MIN_TOKENS`` tokens or more go through BLAS on
weights dequantised one layer at a time instead (many rows: a GEMM is several times faster).

The modules, by role:

* :mod:`.jit`: numba's set-up (512-bit vectors where they help) and the kernels' decorator;
* :mod:`.kernels`: every compiled kernel (quantised matrix products, attention, the forward),
  with the numerics, the tiled weight layout and the threads explained;
* :mod:`.weights`: packing GGUF quant blocks into the kernels' tiles;
* :mod:`.gguf_file`: reading the GGUF header, metadata and tensors;
* :mod:`.kv_cache`: the static KV cache;
* :mod:`.model`: :class:`NativeLlama`, the packed model and its forward;
* :mod:`.target`: :class:`NativeTargetModel` (a ``TargetModel``) and :func:`load_native_gguf`;
* :mod:`.tokenizer`: the GGUF file's tokeniser and :class:`FastTokenizer`.
"""

from __future__ import annotations

from noc_assistant.serving.native.gguf_file import GGUFTensorInfo, LlamaSpec, read_gguf_header
from noc_assistant.serving.native.jit import F32, WIDE_VECTORS
from noc_assistant.serving.native.kernels import KIND_F32, KIND_Q4_1, KIND_Q8_0, TILE
from noc_assistant.serving.native.kv_cache import StaticKVCache
from noc_assistant.serving.native.model import PREFILL_MIN_TOKENS, NativeLlama, rope_tables
from noc_assistant.serving.native.target import NativeTargetModel, load_native_gguf
from noc_assistant.serving.native.tokenizer import FastTokenizer, gguf_tokenizer
from noc_assistant.serving.native.weights import (
    Matrix,
    dequantize_matrix,
    pack_f32,
    pack_q4_1,
    pack_q8_0,
)

__all__ = [
    "F32",
    "KIND_F32",
    "KIND_Q4_1",
    "KIND_Q8_0",
    "PREFILL_MIN_TOKENS",
    "TILE",
    "WIDE_VECTORS",
    "FastTokenizer",
    "GGUFTensorInfo",
    "LlamaSpec",
    "Matrix",
    "NativeLlama",
    "NativeTargetModel",
    "StaticKVCache",
    "dequantize_matrix",
    "gguf_tokenizer",
    "load_native_gguf",
    "pack_f32",
    "pack_q4_1",
    "pack_q8_0",
    "read_gguf_header",
    "rope_tables",
]
