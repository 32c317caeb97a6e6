"""Mask subscriber identifiers (IMSI/SUPI, SUCI, MSISDN/GPSI, IMEI/PEI, GUTI, TMSI, UE IP
addresses) before text leaves.

The patterns are the pack's (``knowledge/guardrails/masking.yaml``): one recogniser per
identifier class, each with its own label in the mask; this module only enforces them, and
holds what is code rather than pattern: the Luhn check, and (through
:mod:`guardrails.mask_views`) the normalisation that lets a pattern written for plain digits
see an identifier however it is written.

Normalisation (before matching; the output keeps the text as it was outside the matches)
    Percent-encoding is decoded (``%2B49…`` is ``+49…``, ``imsi%3D…`` is ``imsi=…``, double
    encoding too), digits of other scripts read as ASCII digits, and separators inside a
    digit group are folded (``+49 (170) 123-4567``, ``+49.170.1234567``, ``001-01-0123456789``,
    ``35 345678 901234 8``): a pattern matches the *view* ``+491701234567`` and the whole
    original span is replaced. Folding leaves alone what only looks like a digit group: dates,
    IPv4 addresses, decimals, and two numbers side by side (a sample's value and its
    timestamp). Each pattern runs on the decoded text first and on the folded text after, so
    folding can add matches but never lose one (a SUCI's dashes are structure, not separators).

:meth:`Masker.mask` applies every pattern in file order, each to the output of the one before,
and replaces each match by the pattern's ``replacement`` (``\\1``-style group references
allowed). A group that is all digits is written as the normalised digits (a kept MCC-MNC reads
``00101`` whether it was written ``001-01`` or percent-encoded); any other group (a label, a
separator, a JSON key's quotes) is written as the original text, so ``{"imsi":"…"}`` stays
JSON. The other fields mean:

``keep: plmn``
    MCC+MNC stay readable (they are diagnostic); the regex's groups and the replacement carry
    them, so the code adds nothing. Example checks allow up to 6 kept digits (MCC 3 + MNC ≤ 3).
``keep: tac``
    The first 8 digits of the IMEI (the Type Allocation Code, a device model, not a person)
    are written in front of the replacement's ``<…>`` placeholder, which such a pattern needs.
``luhn: true``
    A match whose identifier (its longest run of digits) has 15 digits is masked only if it
    passes the Luhn check (an IMEI's last digit is a Luhn check digit). Any other length, in
    particular a 16-digit IMEISV (software version instead of a check digit), is always
    masked: when in doubt, mask.
``context_words``
    A match is masked only if it contains one of these words (whole word, any case), and the
    pattern is skipped for text holding none of them.
``replacement: '\\g<0>'`` (a *hold*)
    The match is kept as it is, and no pattern after it may touch it: the text is known not to
    be an identifier (a counter's value: ``bytes_total 123456789012345`` is a count, not an
    IMSI). Holds come after the labelled recognisers (``imsi=…`` is masked whatever follows:
    labelled contexts win) and before the unlabelled ones (bare 15 digits).

In :meth:`Masker.mask_mapping` a mapping key is read as the label of its value:
``{"imsi": 262011234567890}`` masks as ``imsi 262011234567890`` would.

Masking is idempotent (masked text masks to itself) as long as no replacement produces text
a pattern matches again; :func:`check_examples` checks that, and the pack's own ``examples``
and ``non_examples`` (``noc pack test`` runs it).

>>> from knowledge.pack import load_pack
>>> masker = Masker.from_pack(load_pack())
>>> result = masker.mask("UE imsi-262011234567890 failed registration, IMEI: 490154203237518")
>>> result.text
'UE imsi-26201<masked> failed registration, IMEI: 49015420<imei-masked>'
>>> dict(result.counts)
{'supi-imsi': 1, 'bare-imei': 1}
>>> masker.mask(result.text).text == result.text
True
>>> masker.mask('{"msisdn":"%2B49 (170) 123-4567","bytes_total":310260123456789}').text
'{"msisdn":"<msisdn-masked>","bytes_total":310260123456789}'
>>> masker.mask_mapping({"imsi": "262011234567890", "msisdn": ["+4915112345678"], "n": 3})
{'imsi': '26201<masked>', 'msisdn': ['<msisdn-masked>'], 'n': 3}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from guardrails.errors import GuardrailPolicyError, MaskingError
from guardrails.mask_views import HELD, View, decoded_view, normalise, views_of
from knowledge.schema import MaskingPattern

if TYPE_CHECKING:
    from knowledge.pack import Pack

__all__ = [
    "ExampleResult",
    "MaskResult",
    "Masker",
    "check_examples",
    "luhn_valid",
    "normalise",
]

_TAC_DIGITS = 8
"""An IMEI's Type Allocation Code (3GPP TS 23.003 §6.2)."""
_KEPT_DIGITS = {"none": 0, "plmn": 6, "tac": _TAC_DIGITS}
"""Most identifier digits a ``keep`` mode may leave readable (PLMN: MCC 3 + MNC up to 3)."""
_LUHN_DIGITS = 15
"""Length of an IMEI, whose last digit is a Luhn check digit."""
_HOLD = r"\g<0>"
"""The replacement that marks a pattern as a hold (see the module docstring)."""
_PLACEHOLDER = re.compile(r"(?<!\\g)<[^<>\\]*>")
"""The ``<…>`` placeholder inside a replacement (not a ``\\g<name>`` group reference)."""
_DIGITS = re.compile(r"\d+")
_ASCII_DIGITS = re.compile(r"[0-9]+")
_TEMPLATE_TOKEN = re.compile(r"\\(?:g<([^<>]*)>|([1-9][0-9]?)|(.))", re.DOTALL)
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check (ISO/IEC 7812-1).

    >>> luhn_valid("490154203237518"), luhn_valid("490154203237519")
    (True, False)
    """
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char)
        if i % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _identifier(matched: str) -> str:
    """The identifier digits of a match: its longest run of digits, hyphen-separated groups
    joined (``35-345678-901234-8`` is one IMEI)."""
    return max(_DIGITS.findall(re.sub(r"(?<=\d)-(?=\d)", "", matched)), key=len, default="")


@dataclass(frozen=True)
class MaskResult:
    """Masked text and how many identifiers each pattern masked (ids with none left out)."""

    text: str
    counts: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def total(self) -> int:
        """Identifiers masked, all patterns together."""
        return sum(self.counts.values())


@dataclass(frozen=True)
class _Group:
    """A group reference of a replacement (``\\1``, ``\\g<name>``)."""

    ref: int | str


_Part = str | _Group
"""A parsed replacement: literal text, or a group to write."""


class _Compiled:
    """One pattern ready to apply: regex, replacement parts, context words."""

    def __init__(self, pattern: MaskingPattern) -> None:
        self.pattern = pattern
        pid = pattern.id
        try:
            self.regex = re.compile(pattern.regex)
        except re.error as exc:
            raise GuardrailPolicyError(f"regex does not compile: {exc}", pattern_id=pid) from None
        self._check_template(pattern.replacement)
        self.hold = pattern.replacement == _HOLD
        head, placeholder, tail = pattern.replacement, "", ""
        if pattern.keep == "tac":
            found = _PLACEHOLDER.search(pattern.replacement)
            if found is None:
                raise GuardrailPolicyError(
                    "keep: tac needs a <…> placeholder in the replacement to put the TAC before",
                    pattern_id=pid,
                )
            head = pattern.replacement[: found.start()]
            placeholder = found.group()
            tail = pattern.replacement[found.end() :]
        self.head, self.placeholder, self.tail = (_parse(t) for t in (head, placeholder, tail))
        words = [w for w in pattern.context_words if w.strip()]
        self.context: re.Pattern[str] | None = None
        if words:
            self.context = re.compile(
                r"(?<![^\W_])(?:" + "|".join(re.escape(w) for w in words) + r")(?![^\W_])",
                re.IGNORECASE,
            )
        self.context_words = frozenset(w.casefold() for w in words)

    def _check_template(self, template: str) -> None:
        try:
            self.regex.sub(template, "")  # parses the template: bad escapes, missing groups
        except (re.error, IndexError) as exc:
            raise GuardrailPolicyError(
                f"replacement {template!r} is invalid: {exc}", pattern_id=self.pattern.id
            ) from None

    def _replace(self, match: re.Match[str], view: View, original: str) -> str | None:
        """The replacement of one match, or None where the pattern does not apply to it."""
        matched = match.group()
        if self.context is not None and not self.context.search(matched):
            return None
        digits = _identifier(matched)
        if self.pattern.luhn and len(digits) == _LUHN_DIGITS and not luhn_valid(digits):
            return None
        if self.hold:
            return original[slice(*view.span(*match.span()))]
        head = _expand(self.head, match, view, original)
        if self.pattern.keep != "tac":
            return head
        placeholder = _expand(self.placeholder, match, view, original)
        return head + digits[:_TAC_DIGITS] + placeholder + _expand(self.tail, match, view, original)

    def apply(
        self, text: str, held: list[tuple[int, int]]
    ) -> tuple[str, int, list[tuple[int, int]]]:
        """``text`` with this pattern applied on each view in turn
        (:func:`~guardrails.mask_views.views_of`): its matches masked, and the held spans after
        it."""
        if self.context is not None and not self.context.search(decoded_view(text, held).text):
            return text, 0, held
        count = 0
        views = list(views_of(text, held))
        done = 0
        while done < len(views):
            text, n, held, changed = self._apply_view(text, held, views[done])
            count += n
            done += 1
            if changed:
                views = list(views_of(text, held))
        return text, count, held

    def _apply_view(
        self, text: str, held: list[tuple[int, int]], view: View
    ) -> tuple[str, int, list[tuple[int, int]], bool]:
        edits: list[tuple[int, int, str]] = []
        for m in self.regex.finditer(view.text):
            if m.start() == m.end():
                continue
            start, end = view.span(m.start(), m.end())
            if held and HELD in m.group() and _overlaps(held, start, end):
                continue
            replaced = self._replace(m, view, text)
            if replaced is not None:
                edits.append((start, end, replaced))
        if not edits:
            return text, 0, held, False
        if self.hold:
            return text, 0, sorted([*held, *((s, e) for s, e, _ in edits)]), True
        text, held = _splice(text, edits, held)
        return text, len(edits), held, True


def _overlaps(held: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Whether ``[start, end)`` overlaps one of the (sorted, disjoint) held spans."""
    for s, e in held:
        if s >= end:
            return False
        if e > start:
            return True
    return False


def _parse(template: str) -> list[_Part]:
    """A replacement as literal text and group references (validated by the regex first)."""
    parts: list[_Part] = []
    at = 0
    for m in _TEMPLATE_TOKEN.finditer(template):
        if m.start() > at:
            parts.append(template[at : m.start()])
        name, number, char = m.groups()
        if name is not None:
            parts.append(_Group(int(name) if name.isdigit() else name))
        elif number is not None:
            parts.append(_Group(int(number)))
        else:
            parts.append(_ESCAPES.get(char, char))
        at = m.end()
    if at < len(template):
        parts.append(template[at:])
    return [p for p in parts if p != ""]


def _expand(parts: list[_Part], match: re.Match[str], view: View, original: str) -> str:
    """A replacement written out: a group of digits as its normalised digits, any other group
    as the original text it came from (labels and separators stay as they were written)."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        value = match.group(part.ref)
        if not value:
            continue
        if _ASCII_DIGITS.fullmatch(value):
            out.append(value)
        else:
            out.append(original[slice(*view.span(*match.span(part.ref)))])
    return "".join(out)


def _splice(
    text: str, edits: list[tuple[int, int, str]], held: list[tuple[int, int]]
) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with the (sorted, disjoint) edits made, and the held spans moved with it."""
    pieces: list[str] = []
    at = 0
    for start, end, new in edits:
        pieces.append(text[at:start])
        pieces.append(new)
        at = end
    pieces.append(text[at:])
    moved: list[tuple[int, int]] = []
    for s, e in held:
        shift = sum(len(new) - (end - start) for start, end, new in edits if end <= s)
        moved.append((s + shift, e + shift))
    return "".join(pieces), moved


class Masker:
    """Applies a pack's masking patterns, in order, to text and to JSON-like payloads."""

    def __init__(self, patterns: Iterable[MaskingPattern]) -> None:
        self._rules = tuple(_Compiled(p) for p in patterns)

    @classmethod
    def from_pack(cls, pack: Pack) -> Masker:
        """The masker of a loaded pack (``pack.masking``, in file order)."""
        return cls(pack.masking)

    @property
    def patterns(self) -> tuple[MaskingPattern, ...]:
        return tuple(r.pattern for r in self._rules)

    def mask(self, text: str) -> MaskResult:
        """Mask every identifier in ``text``."""
        counts: dict[str, int] = {}
        held: list[tuple[int, int]] = []
        for rule in self._rules:
            text, n, held = rule.apply(text, held)
            if n:
                counts[rule.pattern.id] = counts.get(rule.pattern.id, 0) + n
        return MaskResult(text, MappingProxyType(counts))

    def mask_mapping(self, obj: Any) -> Any:
        """A copy of a JSON-like payload with every string masked, mapping keys included.

        Dicts (any mapping; the copy is a ``dict``), lists, tuples, sets and frozensets are
        walked; ``int``, ``float``, ``bool`` and ``None`` pass through, except that a number or
        string whose key labels it as an identifier (``{"imsi": 262011234567890}``) is masked
        with its key as the label and then comes back as a string. Anything else (models,
        bytes, dates) raises :class:`MaskingError`: dump models to JSON-compatible data first.
        Two keys that mask to the same text raise too rather than lose an entry.
        """
        return self._walk(obj, None)

    def _walk(self, obj: Any, key: str | None) -> Any:
        if isinstance(obj, str):
            return self._mask_value(obj, key)
        if isinstance(obj, bool) or obj is None or isinstance(obj, float):
            return obj
        if isinstance(obj, int):
            masked = self._mask_value(str(obj), key)
            return obj if masked == str(obj) else masked
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            for k, v in obj.items():
                new_key = self.mask(k).text if isinstance(k, str) else k
                if new_key in out:
                    raise MaskingError(f"two mapping keys mask to the same key {new_key!r}")
                out[new_key] = self._walk(v, k if isinstance(k, str) else None)
            return out
        if isinstance(obj, list):
            return [self._walk(item, key) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self._walk(item, key) for item in obj)
        if isinstance(obj, set | frozenset):
            items = {self._walk(item, key) for item in obj}
            return items if isinstance(obj, set) else frozenset(items)
        raise MaskingError(
            f"cannot mask a {type(obj).__name__}; pass JSON-compatible data "
            "(str, numbers, bool, None, dicts, lists, tuples, sets)"
        )

    def _mask_value(self, value: str, key: str | None) -> str:
        """``value`` masked with its key as its label (``imsi`` says what 15 digits are, and
        ``bytes_total`` that they are a count): labelled contexts win."""
        if key is not None and key.strip():
            label = key.strip()
            joint = self.mask(f"{label} {value}").text
            if joint.startswith(label + " "):
                return joint[len(label) + 1 :]
        return self.mask(value).text


@dataclass(frozen=True)
class ExampleResult:
    """Outcome of one ``examples`` / ``non_examples`` entry of a masking pattern."""

    pattern_id: str
    text: str
    positive: bool
    passed: bool
    detail: str


_LEAK_RUN = 3
"""Shortest run of identifier digits that counts as a leak (a label's ``5`` of ``5G`` does not)."""


def _leaked_digits(rule: _Compiled, original: str, masked: str) -> list[str]:
    """Digit runs of ``masked`` that are part of an identifier the rule matched and neither
    context nor a kept identifier prefix."""
    view = list(views_of(original, ()))[-1]
    idents = [_identifier(m.group()) for m in rule.regex.finditer(view.text) if m.group()]
    context = set(_DIGITS.findall(rule.regex.sub(" ", view.text)))
    kept = _KEPT_DIGITS[rule.pattern.keep]
    return [
        run
        for run in _DIGITS.findall(masked)
        if run not in context
        and len(run) >= _LEAK_RUN
        and any(run in ident for ident in idents)
        and not any(len(run) <= kept and ident.startswith(run) for ident in idents)
    ]


def _check_hold(masker: Masker, rule: _Compiled, text: str) -> ExampleResult:
    """A hold's example passes if the hold matches it and the masker leaves it unchanged."""
    pid = rule.pattern.id
    problems: list[str] = []
    if not any(rule.regex.search(v.text) for v in views_of(text, ())):
        problems.append("not matched by this pattern")
    result = masker.mask(text)
    if result.text != text:
        problems.append(f"masked by {', '.join(result.counts)}: {result.text}")
    return ExampleResult(pid, text, True, not problems, "; ".join(problems) or "kept")


def check_examples(masker: Masker) -> list[ExampleResult]:
    """Run every pattern's own examples through the whole masker.

    An example passes if its pattern masks it, no identifier digit beyond the kept prefix
    (``keep``) survives and masking the result changes nothing (a hold's example: if the hold
    matches it and the masker leaves it unchanged); a non-example passes if the masker leaves
    it unchanged.

    >>> from knowledge.pack import load_pack
    >>> results = check_examples(Masker.from_pack(load_pack()))
    >>> [r for r in results if not r.passed]
    []
    """
    results: list[ExampleResult] = []
    for rule in masker._rules:
        pid = rule.pattern.id
        for text in rule.pattern.examples:
            if rule.hold:
                results.append(_check_hold(masker, rule, text))
                continue
            result = masker.mask(text)
            problems: list[str] = []
            if not result.counts.get(pid):
                by = ", ".join(result.counts)
                problems.append("not masked by this pattern" + (f" (masked by {by})" if by else ""))
            leaked = _leaked_digits(rule, text, result.text)
            if leaked:
                problems.append("identifier digits survive: " + ", ".join(leaked))
            if masker.mask(result.text).text != result.text:
                problems.append("masking the masked text changes it (not idempotent)")
            detail = "; ".join(problems) or f"-> {result.text}"
            results.append(ExampleResult(pid, text, True, not problems, detail))
        for text in rule.pattern.non_examples:
            result = masker.mask(text)
            passed = result.text == text
            detail = (
                "unchanged" if passed else f"masked by {', '.join(result.counts)}: {result.text}"
            )
            results.append(ExampleResult(pid, text, False, passed, detail))
    return results
