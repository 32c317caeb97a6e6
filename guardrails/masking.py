"""Mask subscriber identifiers (IMSI/SUPI, SUCI, MSISDN/GPSI, IMEI/PEI) before text leaves.

The patterns are the pack's (``knowledge/guardrails/masking.yaml``); this module only enforces
them. :meth:`Masker.mask` applies every pattern in file order, each to the output of the one
before, and replaces each match by the pattern's ``replacement`` (``\\1``-style group
references allowed). The other fields mean:

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
    pattern is skipped for text holding none of them. In :meth:`Masker.mask_mapping` a mapping
    key with a context word among its words (``imsi``, ``ue_imsi``, ``subscriber-id``) is
    context for its value too.

Masking is idempotent (masked text masks to itself) as long as no replacement produces text
a pattern matches again; :func:`check_examples` checks that, and the pack's own ``examples``
and ``non_examples`` (``noc pack test`` runs it).

>>> from knowledge.pack import load_pack
>>> masker = Masker.from_pack(load_pack())
>>> result = masker.mask("UE imsi-262011234567890 failed registration, IMEI: 490154203237518")
>>> result.text
'UE imsi-26201<masked> failed registration, IMEI 49015420<imei-masked>'
>>> dict(result.counts)
{'supi-imsi': 1, 'bare-imei': 1}
>>> masker.mask(result.text).text == result.text
True
>>> masker.mask_mapping({"imsi": "262011234567890", "msisdn": ["+4915112345678"], "n": 3})
{'imsi': '26201<masked>', 'msisdn': ['<msisdn-masked>'], 'n': 3}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from guardrails.errors import GuardrailPolicyError, MaskingError
from knowledge.schema import MaskingPattern

if TYPE_CHECKING:
    from knowledge.pack import Pack

__all__ = [
    "ExampleResult",
    "MaskResult",
    "Masker",
    "check_examples",
    "luhn_valid",
]

_TAC_DIGITS = 8
"""An IMEI's Type Allocation Code (3GPP TS 23.003 §6.2)."""
_KEPT_DIGITS = {"none": 0, "plmn": 6, "tac": _TAC_DIGITS}
"""Most identifier digits a ``keep`` mode may leave readable (PLMN: MCC 3 + MNC up to 3)."""
_LUHN_DIGITS = 15
"""Length of an IMEI, whose last digit is a Luhn check digit."""
_PLACEHOLDER = re.compile(r"(?<!\\g)<[^<>\\]*>")
"""The ``<…>`` placeholder inside a replacement (not a ``\\g<name>`` group reference)."""
_DIGITS = re.compile(r"\d+")
_WORDS = re.compile(r"[^\W_]+")


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
        self.head, self.placeholder, self.tail = pattern.replacement, "", ""
        if pattern.keep == "tac":
            found = _PLACEHOLDER.search(pattern.replacement)
            if found is None:
                raise GuardrailPolicyError(
                    "keep: tac needs a <…> placeholder in the replacement to put the TAC before",
                    pattern_id=pid,
                )
            self.head = pattern.replacement[: found.start()]
            self.placeholder = found.group()
            self.tail = pattern.replacement[found.end() :]
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

    def _replace(self, match: re.Match[str]) -> str | None:
        """The replacement of one match, or None where the pattern does not apply to it."""
        matched = match.group()
        if self.context is not None and not self.context.search(matched):
            return None
        digits = _identifier(matched)
        if self.pattern.luhn and len(digits) == _LUHN_DIGITS and not luhn_valid(digits):
            return None
        if self.pattern.keep != "tac":
            return match.expand(self.head)
        return (
            match.expand(self.head)
            + digits[:_TAC_DIGITS]
            + match.expand(self.placeholder)
            + match.expand(self.tail)
        )

    def apply(self, text: str) -> tuple[str, int]:
        if self.context is not None and not self.context.search(text):
            return text, 0
        count = 0

        def substitute(match: re.Match[str]) -> str:
            nonlocal count
            replaced = self._replace(match)
            if replaced is None:
                return match.group()
            count += 1
            return replaced

        return self.regex.sub(substitute, text), count


class Masker:
    """Applies a pack's masking patterns, in order, to text and to JSON-like payloads."""

    def __init__(self, patterns: Iterable[MaskingPattern]) -> None:
        self._rules = tuple(_Compiled(p) for p in patterns)
        self._context_words = frozenset(w for r in self._rules for w in r.context_words)

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
        for rule in self._rules:
            text, n = rule.apply(text)
            if n:
                counts[rule.pattern.id] = counts.get(rule.pattern.id, 0) + n
        return MaskResult(text, MappingProxyType(counts))

    def mask_mapping(self, obj: Any) -> Any:
        """A copy of a JSON-like payload with every string masked, mapping keys included.

        Dicts (any mapping; the copy is a ``dict``), lists, tuples, sets and frozensets are
        walked; ``int``, ``float``, ``bool`` and ``None`` pass through, except that a number or
        string under a key naming a context word (``{"imsi": 262011234567890}``) is masked with
        that word as context and then comes back as a string. Anything else (models, bytes,
        dates) raises :class:`MaskingError`: dump models to JSON-compatible data first. Two keys
        that mask to the same text raise too rather than lose an entry.
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
        masked = self.mask(value).text
        if masked != value or key is None:
            return masked
        for word in _WORDS.findall(key):
            if word.casefold() not in self._context_words:
                continue
            joint = self.mask(f"{word} {value}").text
            if joint != f"{word} {value}":
                return joint[len(word) :].lstrip() if joint.startswith(word) else joint
        return masked


@dataclass(frozen=True)
class ExampleResult:
    """Outcome of one ``examples`` / ``non_examples`` entry of a masking pattern."""

    pattern_id: str
    text: str
    positive: bool
    passed: bool
    detail: str


def _leaked_digits(rule: _Compiled, original: str, masked: str) -> list[str]:
    """Digit runs of ``masked`` that are neither context nor a kept identifier prefix."""
    idents = [_identifier(m.group()) for m in rule.regex.finditer(original)]
    context = set(_DIGITS.findall(rule.regex.sub(" ", original)))
    kept = _KEPT_DIGITS[rule.pattern.keep]
    return [
        run
        for run in _DIGITS.findall(masked)
        if run not in context
        and not any(len(run) <= kept and ident.startswith(run) for ident in idents)
    ]


def check_examples(masker: Masker) -> list[ExampleResult]:
    """Run every pattern's own examples through the whole masker.

    An example passes if its pattern masks it, no identifier digit beyond the kept prefix
    (``keep``) survives and masking the result changes nothing; a non-example passes if the
    masker leaves it unchanged.

    >>> from knowledge.pack import load_pack
    >>> results = check_examples(Masker.from_pack(load_pack()))
    >>> [r for r in results if not r.passed]
    []
    """
    results: list[ExampleResult] = []
    for rule in masker._rules:
        pid = rule.pattern.id
        for text in rule.pattern.examples:
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
