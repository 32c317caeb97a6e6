"""The native engine's KV cache: preallocated, grown by doubling, cropped in O(1)."""

from __future__ import annotations

import math
import mmap

import numpy as np

from noc_assistant.serving.cache import KVCache
from noc_assistant.serving.errors import RequestError
from noc_assistant.serving.native.jit import F32

__all__ = ["StaticKVCache"]


def _fresh_zeros(shape: tuple[int, ...]) -> F32:
    """A zero fp32 array in its own anonymous memory map.

    Pages are zero-filled by the kernel when first written, so a cache's resident size follows
    the positions actually used, and the map is returned to the OS when the array is dropped
    (from the malloc heap, freed caches would stay resident and grow with every request).
    """
    n = max(1, math.prod(shape)) * 4
    return np.frombuffer(mmap.mmap(-1, n), np.float32, math.prod(shape)).reshape(shape)


class StaticKVCache(KVCache):
    """Preallocated fp32 keys and values of every layer; ``crop`` only moves the length.

    Keys are stored transposed ([layers, kv_heads, head_dim, capacity]) for the attention
    kernel. The capacity doubles (a copy) when a forward needs more, up to ``max_positions``,
    so memory follows the context actually used rather than the model's maximum.

    >>> c = StaticKVCache(n_layers=2, n_kv_heads=1, head_dim=4, max_positions=100)
    >>> c.reserve(10); c.length = 10; c.crop(4); c.length
    4
    >>> c.crop(8); c.length  # never grows
    4
    """

    def __init__(
        self,
        *,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        max_positions: int,
        capacity: int = 256,
    ) -> None:
        self.max_positions = max_positions
        self.length = 0
        cap = max(1, min(capacity, max_positions))
        self.k = _fresh_zeros((n_layers, n_kv_heads, head_dim, cap))
        self.v = _fresh_zeros((n_layers, n_kv_heads, cap, head_dim))

    @property
    def length(self) -> int:
        return self._length

    @length.setter
    def length(self, n: int) -> None:
        self._length = int(n)

    @property
    def capacity(self) -> int:
        return int(self.v.shape[2])

    def reserve(self, n: int) -> None:
        """Make room for ``n`` positions (copying the cached ones)."""
        if n <= self.capacity:
            return
        if n > self.max_positions:
            raise RequestError(
                f"{n} positions asked for; the context is {self.max_positions}",
                code="context_length_exceeded",
            )
        cap = min(self.max_positions, max(n, 2 * self.capacity))
        n_layers, n_kv, hd, _ = self.k.shape
        k = _fresh_zeros((n_layers, n_kv, hd, cap))
        v = _fresh_zeros((n_layers, n_kv, cap, hd))
        k[..., : self.length] = self.k[..., : self.length]
        v[:, :, : self.length] = self.v[:, :, : self.length]
        self.k, self.v = k, v

    def copy_prefix(self, length: int) -> StaticKVCache:
        """A new cache with a copy of the first ``length`` positions (a shared prompt prefix
        served to another request without a forward: ~46 KB a position for SmolLM2-135M)."""
        n = max(0, min(int(length), self.length))
        n_layers, n_kv, hd, _ = self.k.shape
        out = StaticKVCache(
            n_layers=n_layers,
            n_kv_heads=n_kv,
            head_dim=hd,
            max_positions=self.max_positions,
            capacity=self.capacity,  # pages are resident only once written
        )
        out.k[..., :n] = self.k[..., :n]
        out.v[:, :, :n] = self.v[:, :, :n]
        out.length = n
        return out

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (no-op when already shorter)."""
        self._length = min(self._length, max(0, int(length)))
