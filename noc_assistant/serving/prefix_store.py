"""The KV caches of recent generations, kept for the next prompts that begin the same way.

A triage chat's next turn resends the whole conversation, and the product's requests share
long system prompts: everything up to the new message is tokens the model has already seen.
:class:`PrefixStore` keeps the caches of the last ``capacity`` generations (each a
:class:`~noc_assistant.serving.speculative.PrefixCache`: tokens, KV cache, drafter state).
A new request looks for the entry whose tokens share the longest prefix with its prompt:

* when the prompt continues the entry's tokens (a chat's next turn), it takes the entry out
  of the store and extends it in place; its own cache comes back when it ends;
* when it shares only a part (another user's conversation under the same system prompt), it
  gets a copy of that part where the cache can be copied (the native one: a few ms for a few
  hundred positions instead of their forward) and the entry stays for its owner; where it
  cannot be copied (a transformers cache, or a drafter's state to match), it takes the entry
  only if at least half of the entry's tokens are shared, else starts afresh.

An entry is used by one request at a time, so several users' conversations interleave without
evicting one another, as the single cache of the last request did. An entry whose tokens are
a prefix of a newer one's is dropped when that one comes back (it holds nothing more).

Memory: an entry holds its generation's KV cache (46 KB per token for SmolLM2-135M in fp32;
the native cache's pages are only resident where positions were written).

>>> class Cache:
...     length = 0
...     def copy_prefix(self, n: int) -> None:
...         return None
>>> s = PrefixStore(capacity=2)
>>> for toks in ([1, 2, 3], [7, 8, 9]):
...     s.checkin(PrefixCache(tokens=toks, cache=Cache()))  # type: ignore[arg-type]
>>> s.checkout([1, 2, 3, 4, 5]).tokens, len(s)  # continues [1, 2, 3]: taken out
([1, 2, 3], 1)
>>> s.checkout([7, 0, 0]).tokens, len(s)  # one of three shared, no copy: fresh; it stays
([], 1)
>>> s.checkin(PrefixCache(tokens=[4], cache=Cache()))  # type: ignore[arg-type]
>>> s.checkin(PrefixCache(tokens=[4, 5], cache=Cache()))  # type: ignore[arg-type]
>>> [e.tokens for e in s.entries()]  # [4] is a prefix of [4, 5]: dropped
[[7, 8, 9], [4, 5]]
>>> s.checkin(PrefixCache(tokens=[6], cache=Cache()))  # type: ignore[arg-type]
>>> [e.tokens for e in s.entries()]  # two at most: the oldest went
[[4, 5], [6]]
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from noc_assistant.serving.speculative import PrefixCache

__all__ = ["PrefixStore"]


class PrefixStore:
    """Up to ``capacity`` finished generations' caches, oldest dropped first (thread-safe)."""

    def __init__(self, capacity: int = 4) -> None:
        if capacity < 1:
            raise ValueError("a prefix store holds at least one cache")
        self.capacity = capacity
        self._entries: list[PrefixCache] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def entries(self) -> list[PrefixCache]:
        """The free entries, oldest first (a copy of the list)."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        """Drop every entry (their caches are freed when nothing else holds them)."""
        with self._lock:
            self._entries = []

    def checkout(self, prompt: Sequence[int]) -> PrefixCache:
        """A session for ``prompt``: an entry it continues (taken out of the store), a copy of
        the part it shares with one, or a fresh session (see the module doc). The prompt's
        last token is never counted: it always runs, for the first output's logits."""
        with self._lock:
            best, best_n = -1, 0
            for i, e in enumerate(self._entries):
                n = e.reusable(prompt, e.drafter)
                if n >= best_n and n > 0:  # ties: the most recent
                    best, best_n = i, n
            if best < 0:
                return PrefixCache()
            entry = self._entries[best]
            if best_n < len(entry.tokens) and entry.drafter is None and entry.cache is not None:
                copy = entry.cache.copy_prefix(best_n)
                if copy is not None:
                    return PrefixCache(tokens=list(entry.tokens[:best_n]), cache=copy)
            if 2 * best_n < len(entry.tokens):
                return PrefixCache()
            return self._entries.pop(best)

    def checkin(self, session: PrefixCache) -> None:
        """Keep a finished generation's session (nothing when it holds no cache: a forward
        failed, or the generation never ran)."""
        if session.cache is None:
            return
        toks = session.tokens
        with self._lock:
            self._entries = [  # drop those the new one holds all of
                e for e in self._entries if not e.tokens or toks[: len(e.tokens)] != e.tokens
            ]
            self._entries.append(session)
            del self._entries[: max(0, len(self._entries) - self.capacity)]
