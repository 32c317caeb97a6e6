"""What masking patterns match: views of a text in which each character knows the span of the
original it came from (:mod:`guardrails.masking` replaces that span).

A view decodes percent-encoding, reads digits of other scripts as ASCII digits and hides held
spans (:func:`decoded_view`); a folded view also drops the separators inside a number-like
digit group (``+49 (170) 123-4567`` is seen as ``+491701234567``), leaving dates, IPv4
addresses, decimals and two numbers side by side alone (:func:`views_of`; the masking
module's docstring describes the rules).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["HELD", "View", "decoded_view", "normalise", "views_of"]

_ASCII_DIGITS = re.compile(r"[0-9]+")

_PERCENT = re.compile(r"%(?:25)*([0-9A-Fa-f]{2})")
"""A percent-encoded byte, double encoding (``%252B``) included."""
_CHAIN = re.compile(r"[0-9]+(?:(?: ?\( ?| ?\) ?| - |[ ./-])[0-9]+)+")
"""Digit groups joined by single separators: the candidates for folding."""
_CHAIN_ALONE = re.compile(r"(?<![^\W\d_])(?<![^\W\d_]-)" + _CHAIN.pattern)
"""A chain that does not start with a name's number (``gpu-srv-1 35 345678 901234 8``,
``/v1/0049 170 1234567``): folded too, in a view of its own."""
_DATE = re.compile(
    r"(?:19|20)[0-9]{2}[-/.][0-9]{2}[-/.][0-9]{2}|[0-9]{2}[-/.][0-9]{2}[-/.](?:19|20)"
)
_FOLD_DIGITS = (10, 17)
"""Digits a folded group may have: a national MSISDN (10) to an IMEISV with slack (17)."""
_FOLD_GROUPS = 6
"""Most groups a folded chain may have (``+49 (0) 170 123 45 67``); a SUCI has seven."""


def _foldable(chain: str, before: str) -> bool:
    """Whether the separators of a chain of digit groups (:data:`_CHAIN`) are separators of one
    number, to be folded, rather than structure between numbers.

    ``before`` is the character in front of the chain (a ``+`` or ``(`` says phone number).

    >>> [_foldable(c, " ") for c in ("001 01 0123456789", "35-345678-901234-8", "0170/1234567")]
    [True, True, True]
    >>> [_foldable(c, "+") for c in ("49 (170) 1234567", "49.170.1234567", "49 1701234567")]
    [True, True, True]
    >>> [_foldable(c, " ") for c in ("2024-05-01 10", "192.168.100.200", "1714559531.123456")]
    [False, False, False]
    >>> [_foldable(c, " ") for c in ("42 1714559531000", "262-01", "0 0 0 0 0 0 0 0 0 0 0 0")]
    [False, False, False]
    """
    if len(chain) < _FOLD_DIGITS[0]:
        return False
    groups = _ASCII_DIGITS.findall(chain)
    digits = sum(len(g) for g in groups)
    if not 2 <= len(groups) <= _FOLD_GROUPS or not _FOLD_DIGITS[0] <= digits <= _FOLD_DIGITS[1]:
        return False
    kinds = {s.strip() or " " for s in re.findall(r"[^0-9]+", chain)}
    if "." in kinds:
        # +49.170.1234567 is a number; 1.5, 10.0.0.1 and a dotted mix are not
        if kinds != {"."} or len(groups) < 3:
            return False
        if len(groups) == 4 and all(len(g) <= 3 for g in groups):
            return False
    if _DATE.match(chain):
        return False
    if kinds == {" "} and len(groups) == 2:
        # two numbers side by side (a value and its timestamp) unless the first is a
        # country/trunk prefix or a PLMN id: +49 1701234567, 0170 1234567, 26201 0123456789
        first = groups[0]
        return before in ("+", "(") or first.startswith("0") or len(first) in (5, 6)
    return True


@dataclass(frozen=True)
class View:
    """Text as the patterns see it, and where each of its characters came from.

    Either the text itself (``starts`` and ``runs`` None), or identity runs (``runs``: the view
    offset and the original offset where each run of unchanged characters starts: a folded
    view of plain text), or one original span per character (``starts``/``ends``: decoded
    percent-encoding, where one character stands for three). Folded separators have no
    character of their own: they lie inside the span of a match that covers the digits on both
    sides.
    """

    text: str
    starts: Sequence[int] | None = None
    ends: Sequence[int] | None = None
    runs: tuple[list[int], list[int]] | None = None

    def origin(self, index: int) -> tuple[int, int]:
        """The original span of the view's character ``index``."""
        if self.runs is not None:
            views, origins = self.runs
            i = bisect.bisect_right(views, index) - 1
            at = origins[i] + index - views[i]
            return at, at + 1
        if self.starts is None or self.ends is None:
            return index, index + 1
        return self.starts[index], self.ends[index]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the view's ``[start, end)`` (not empty)."""
        return self.origin(start)[0], self.origin(end - 1)[1]


HELD = "\x00"
"""What a held character is in a view: no pattern takes it for a digit or a letter."""
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def decoded_view(text: str, held: Sequence[tuple[int, int]]) -> View:
    """The view with held spans hidden, percent-encoding decoded and digits made ASCII."""
    hidden = text
    if held:
        pieces: list[str] = []
        at = 0
        for s, e in held:
            pieces.append(text[at:s])
            pieces.append(HELD * (e - s))
            at = e
        pieces.append(text[at:])
        hidden = "".join(pieces)
    if "%" not in hidden and not any(c.isdigit() for c in _NON_ASCII.findall(hidden)):
        return View(hidden)
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(hidden)
    while i < n:
        char = hidden[i]
        if char == "%":
            m = _PERCENT.match(hidden, i)
            if m is not None and 0x20 <= int(m.group(1), 16) < 0x7F:
                chars.append(chr(int(m.group(1), 16)))
                starts.append(i)
                ends.append(m.end())
                i = m.end()
                continue
        elif char > "\x7f" and char.isdigit():
            char = str(unicodedata.digit(char, 0))
        chars.append(char)
        starts.append(i)
        ends.append(i + 1)
        i += 1
    return View("".join(chars), starts, ends)


@lru_cache(maxsize=64)
def _fold_drops(text: str, alone: bool) -> tuple[tuple[int, int], ...]:
    """The separator spans of ``text`` that folding removes (cached: every pattern folds the
    same text until one of them changes it)."""
    drop: list[tuple[int, int]] = []
    for m in (_CHAIN_ALONE if alone else _CHAIN).finditer(text):
        before = text[m.start() - 1] if m.start() else ""
        if _foldable(m.group(), before):
            drop.extend(
                (m.start() + sep.start(), m.start() + sep.end())
                for sep in re.finditer(r"[^0-9]+", m.group())
            )
    return tuple(drop)


def _folded(view: View, alone: bool = False) -> View | None:
    """``view`` with the separators of number-like digit groups removed (:func:`_foldable`);
    None when there are none. ``alone``: chains that do not start with a name's number."""
    drop = _fold_drops(view.text, alone)
    if not drop:
        return None
    kept: list[tuple[int, int]] = []
    at = 0
    for s, e in drop:
        kept.append((at, s))
        at = e
    kept.append((at, len(view.text)))
    text = "".join(view.text[s:e] for s, e in kept)
    if view.starts is None or view.ends is None:
        views: list[int] = []
        origins: list[int] = []
        length = 0
        for s, e in kept:
            if e > s:
                views.append(length)
                origins.append(s)
                length += e - s
        return View(text, runs=(views, origins))
    starts = [view.starts[i] for s, e in kept for i in range(s, e)]
    ends = [view.ends[i] for s, e in kept for i in range(s, e)]
    return View(text, starts, ends)


def views_of(text: str, held: Sequence[tuple[int, int]]) -> Iterator[View]:
    """The decoded view, then the folded ones where folding changes anything (chains taken
    greedily, then chains that do not start with a name's number)."""
    decoded = decoded_view(text, held)
    yield decoded
    seen = {decoded.text}
    for alone in (False, True):
        folded = _folded(decoded, alone)
        if folded is not None and folded.text not in seen:
            seen.add(folded.text)
            yield folded


def normalise(text: str) -> str:
    """What the patterns match: ``text`` percent-decoded, its digits ASCII and the separators
    of its number-like digit groups folded (see the module docstring).

    >>> normalise("msisdn=%2B49%20(170)%20123-4567 at 2024-05-01 10:32, imsi 001 01 0123456789")
    'msisdn=+491701234567 at 2024-05-01 10:32, imsi 001010123456789'
    """
    views = list(views_of(text, ()))
    return views[-1].text
