"""An explicit KV cache with crop, for the target (speculative verification rolls it back)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["KVCache", "shared_prefix"]


class KVCache:
    """Wraps a transformers ``DynamicCache``; ``length`` tokens are cached, ``crop`` rolls back."""

    def __init__(self, config: Any = None) -> None:
        from transformers import DynamicCache

        self.inner = DynamicCache(config=config) if config is not None else DynamicCache()

    @property
    def length(self) -> int:
        return int(self.inner.get_seq_length())

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (no-op when already shorter)."""
        drop = self.length - length
        if drop > 0:
            self.inner.crop(-drop)

    def copy_prefix(self, length: int) -> KVCache | None:
        """A new cache holding a copy of the first ``length`` positions, or None where a cache
        cannot be copied cheaply (this one: a transformers cache; the native one can)."""
        return None


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` have in common.

    >>> shared_prefix([1, 2, 3], [1, 2, 4, 5]), shared_prefix([], [1])
    (2, 0)
    """
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
