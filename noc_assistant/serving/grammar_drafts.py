"""The drafts of a speculative round under a grammar, and the masks of their positions.

Used by :func:`noc_assistant.serving.speculative.stream_tokens` with a ``constraint``: drafts
are checked against the grammar before verification and cut at the first disallowed one;
where the grammar allows a single token that token is drafted, and where the drafter has
nothing left the grammar's fast-forward tokens are drafted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:  # llguidance is only needed when a grammar is used
    from noc_assistant.serving.grammar import Constraint

__all__ = ["MAX_GRAMMAR_DRAFTS", "grammar_drafts", "grammar_proposals", "mask_logits"]


#: Longest run of grammar drafts (forced / fast-forward tokens) verified in one forward.
MAX_GRAMMAR_DRAFTS = 64


def mask_logits(logits: Tensor, masks: list[Tensor]) -> Tensor:
    """``logits`` [P, V] with what row ``i``'s mask ``masks[i]`` [V] disallows set to -inf."""
    allowed = torch.stack(masks).to(logits.device)
    return logits.masked_fill(~allowed, float("-inf"))


def grammar_drafts(
    c: Constraint,
    proposed: Sequence[int],
    cap: int,
    eos: frozenset[int],
) -> tuple[list[int], list[Tensor], list[bool], list[int]]:
    """Advance ``c`` through the drafts of one round; return them with every position's mask.

    Position ``j`` (the state after the anchor and ``drafts[:j]``) drafts the grammar's single
    allowed token when there is one, else the drafter's ``proposed[j]`` when allowed (the
    drafter's tokens are dropped from the first disagreement on: they were conditioned on a
    different prefix), else the next fast-forward token. Returns ``(drafts, masks, forced,
    source)``: ``len(masks) == len(drafts) + 1`` (the last is the bonus position's),
    ``forced[j]`` whether position ``j`` allowed one token only, and ``source[j]`` the index
    into ``proposed`` a draft came from (-1 for a grammar draft).
    """
    drafts: list[int] = []
    masks: list[Tensor] = []
    forced: list[bool] = []
    source: list[int] = []
    use_prop = True
    ff: list[int] = []  # fast-forward tokens from the current state on
    while True:
        allowed = c.allowed()
        masks.append(torch.from_numpy(allowed))
        single = c.single(allowed)
        forced.append(single is not None)
        j = len(drafts)
        if j >= cap or c.is_stopped():
            break
        prop = proposed[j] if use_prop and j < len(proposed) else None
        if prop is not None and (prop in eos or not allowed[prop]):
            prop = None
        if single is not None:
            if single in eos:
                break
            tok, src = single, (j if prop == single else -1)
        elif prop is not None:
            tok, src = prop, j
        else:
            if not ff:
                ff = c.forced_tokens()
            if not ff or not allowed[ff[0]]:
                break
            tok, src = ff[0], -1
        if src < 0:
            use_prop = False
        ff = ff[1:] if ff and ff[0] == tok else []
        c.consume([tok])
        drafts.append(tok)
        source.append(src)
    return drafts, masks, forced, source


def grammar_proposals(
    drafts: list[int], source: list[int], prop_probs: Tensor | None, vocab: int
) -> Tensor:
    """Proposal distributions [len(drafts), vocab] of a round's drafts for sampling: the
    drafter's where a draft came from it, a one-point distribution for a grammar draft."""
    probs = torch.zeros(len(drafts), vocab)
    for j, (tok, src) in enumerate(zip(drafts, source, strict=True)):
        if src >= 0 and prop_probs is not None:
            probs[j] = prop_probs[src, :vocab].float().cpu()
        else:  # a deterministic grammar draft
            probs[j, tok] = 1.0
    return probs
