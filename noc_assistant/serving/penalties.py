"""OpenAI's repetition penalties, applied where speculative decoding verifies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["NO_PENALTIES", "Penalties"]


@dataclass(frozen=True)
class Penalties:
    """OpenAI's ``frequency_penalty`` and ``presence_penalty``: a token's logit is lowered by
    ``frequency`` for each time it is already in the output, and by ``presence`` once it is
    there at all (the prompt does not count). Applied to the target's logits at every
    position a round verifies, with the counts of the output up to that position, so greedy
    speculative decoding still equals penalised greedy decoding token for token. A small
    model's greedy decoding loops; a penalty is how a request says not to."""

    frequency: float = 0.0
    presence: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.frequency or self.presence)

    def apply(self, logits: Tensor, output: Sequence[int], drafts: Sequence[int] = ()) -> Tensor:
        """``logits`` (one row per verified position: the output so far, then each draft
        added) with the penalties subtracted; the tensor itself when there are none.

        >>> p = Penalties(frequency=1.0, presence=0.5)
        >>> p.apply(torch.zeros(2, 4), [1, 1], [2]).tolist()
        [[0.0, -2.5, 0.0, 0.0], [0.0, -2.5, -1.5, 0.0]]
        """
        if not self or not (output or drafts):
            return logits
        counts = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
        if output:
            seen = torch.tensor(list(output), device=logits.device)
            counts.index_add_(
                0, seen, torch.ones(len(output), dtype=logits.dtype, device=logits.device)
            )
        rows = []
        for i in range(logits.shape[0]):
            if i > 0:
                counts[drafts[i - 1]] += 1
            rows.append(logits[i] - counts * self.frequency - (counts > 0) * self.presence)
        return torch.stack(rows)


#: no penalty: what a request that sends none gets
NO_PENALTIES = Penalties()
