"""Check that a drafted report, e-mail or chat answer says only what its evidence says.

The policy is the pack's (``knowledge/guardrails/grounding.yaml``). A draft cites

* evidence as ``[ev-…]``: whatever ``policy.evidence_id_pattern`` matches, one id per
  bracket; the id is the pattern's first group if it has one, else the match without its
  surrounding ``[]`` (``[ev-f1]`` cites ``ev-f1``, a key of the ``evidence`` mapping);
* references as ``[ref:<id>]`` with an id of ``pack.references`` (``[ref:ts-29-244]``).

The draft is split into lines, lines into sentences (at ``.``/``!``/``?`` followed by space,
but not after ``e.g.``, ``i.e.``, ``etc.``, ``vs.``, ``cf.``); a list or heading marker at the
start of a line is not part of its sentence, and a fragment made only of citations
(``… 45 %. [ev-f1]``) belongs to the sentence before it on the same line. The checks, per
sentence:

``unknown_evidence``
    a cited evidence id that is not in ``evidence`` (always checked);
``unknown_reference``
    a ``[ref:…]`` id that is not a known reference (``require_reference_ids``);
``uncited_number``
    a number in a sentence that cites no evidence (``require_evidence_ids``);
``number_mismatch``
    a number in a sentence citing evidence that matches none of the numbers of the cited
    evidence, ``values`` and those written in its ``summary`` (``require_number_match``).

A number matches if it is within ``number_tolerance`` (relative) of an evidence number, or
that number rounds to it at the precision written (``45 %`` for 0.4523); signs are ignored
(``fell by 5 %`` for -0.05), and a percentage matches a ratio (``45 %`` ↔ 0.45, either side).
Not numbers: digits glued to letters or ids (``amf-2``, ``5GMM#7``, ``N4``, ``p99``,
``imsi-26201<masked>``), dotted chains (versions, IPs), spec numbers and clauses
(``TS 29.244 §6.2.2``, ``RFC 9260``, ``Release 17``), dates, times, ISO timestamps and epoch
seconds/milliseconds, and the citations themselves. ``%``, ``percent`` and a glued ``ms``,
``us``, ``ns``, ``s`` or ``x`` may follow a number; other glued units make it a name.

``policy.unsupported_claim``: ``flag`` reports the issues and keeps the text; ``strip`` also
removes every sentence with an issue (a line left empty goes too); ``reject`` raises
:class:`UngroundedError` carrying the report.

>>> from knowledge.pack import load_pack
>>> from noc_assistant.models import Evidence
>>> pack = load_pack()
>>> ev = {"ev-f1": Evidence(id="ev-f1", entity="udm-1", start=0, end=60, values=(0.452,),
...                         summary="udm_timeout_rate up on udm-1")}
>>> draft = "UDM timeouts reached 45 % on udm-1 [ev-f1]. Per TS 29.503 [ref:ts-29-503] ..."
>>> check_grounding(draft, ev, pack.references, pack.grounding).ok
True
>>> report = check_grounding("Timeouts hit 60 % [ev-f1].", ev, pack.references, pack.grounding)
>>> [(i.kind, i.token) for i in report.issues]
[('number_mismatch', '60 %')]
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from guardrails.errors import GuardrailError, GuardrailPolicyError
from knowledge.schema import GroundingPolicy

__all__ = [
    "EvidenceLike",
    "GroundingIssue",
    "GroundingReport",
    "IssueKind",
    "UngroundedError",
    "check_grounding",
    "cite_numbers",
]

IssueKind = Literal["unknown_evidence", "unknown_reference", "uncited_number", "number_mismatch"]

_REFERENCE = re.compile(r"\[ref:([^\]\s]+)\]")
_LINE = re.compile(r"[^\n]+")
_SENTENCE_BREAK = re.compile(
    r"(?<=[.!?])(?<!\b[A-Za-z]\.)(?<!\betc\.)(?<!\bvs\.)(?<!\bcf\.)\s+(?=\S)"
)
"""Where a sentence ends: after ``.``, ``!`` or ``?`` and space, not after ``e.g.``-style
abbreviations (a single letter and a dot), ``etc.``, ``vs.`` or ``cf.``."""
_MARKER = re.compile(r"\s*(?:(?:#{1,6}|>|[-*•+]|\(?\d{1,2}[.)])\s+)+")
_NOT_CLAIMS = re.compile(
    r"""
      \b(?:3GPP\s+|ETSI\s+)?T[SR]\s*\d+(?:\.\d+)*        # 3GPP / ETSI specs
    | \b(?:RFC|IR\.?)\s*\d+(?:\.\d+)*                   # IETF RFCs, GSMA IR.nn
    | §\s*\d+(?:\.\d+)*                                 # clauses
    | \b(?:clause|section|annex|table|figure)\s+[A-Z]?\d+(?:\.\d+)*
    | \bRel(?:ease)?[-.\s]*\d+
    | (?<![\w.:/-])\d{4}-\d{2}-\d{2}(?:[T\s]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?
      (?:\s?(?:Z|UTC|[+-]\d{2}:?\d{2})\b)?              # dates, ISO timestamps
    | (?<![\w.:])\d{1,2}:[0-5]\d(?::[0-5]\d(?:[.,]\d+)?)?(?![\d:])
      (?:\s?(?:Z|UTC)\b)?                                 # times of day
    | (?<![\w./])\d{1,2}/\d{1,2}/\d{2,4}(?![\w/])            # dates
    | \b1\d{9}(?:\d{3})?(?:\.\d+)?\b                    # epoch seconds / milliseconds
    """,
    re.VERBOSE | re.IGNORECASE,
)
_NUMBER = re.compile(
    r"""
    (?<![\w.,:/#§@<>+\-−])                       # not glued to a name, path, version or time
    (?P<sign>[-+−])?
    (?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?
    (?:[eE](?P<exp>[-+]?\d+))?
    (?P<unit>\s?%|\s?per\s?cent\b|(?:ms|us|µs|ns|s|x)\b)?
    (?![\w<>@#/:%]|[.,]\d|-\w)                   # nor on the right
    """,
    re.VERBOSE,
)
_EVIDENCE_NUMBER = re.compile(r"(?<!\d)(?<!\d\.)(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(\s?%)?")


class EvidenceLike(Protocol):
    """What grounding reads of an evidence item (``noc_assistant.models.Evidence`` has it)."""

    @property
    def values(self) -> Sequence[float]: ...

    @property
    def summary(self) -> str: ...


@dataclass(frozen=True)
class GroundingIssue:
    """One unsupported claim: what is wrong, in which sentence, which token."""

    kind: IssueKind
    sentence: str
    token: str


@dataclass(frozen=True)
class GroundingReport:
    """Outcome of :func:`check_grounding`.

    ``ok``: no issue found. ``text``: the draft after the policy's action (``strip`` removes
    the ``removed`` sentences; otherwise the draft unchanged).
    """

    ok: bool
    issues: tuple[GroundingIssue, ...]
    text: str
    removed: tuple[str, ...] = ()


class UngroundedError(GuardrailError):
    """A draft makes unsupported claims and the policy says ``unsupported_claim: reject``.

    ``report`` holds every issue found.
    """

    def __init__(self, report: GroundingReport) -> None:
        self.report = report
        kinds = sorted({issue.kind for issue in report.issues})
        super().__init__(
            f"draft rejected: {len(report.issues)} grounding issue(s) ({', '.join(kinds)})"
        )


@dataclass(frozen=True)
class _Number:
    token: str
    value: float
    percent: bool
    half_unit: float
    """Half a unit of the last digit written: what rounding to the precision shown can hide."""


def _claims(sentence: str) -> list[_Number]:
    """The numbers a sentence states (citations already blanked out)."""
    text = _NOT_CLAIMS.sub(lambda m: " " * len(m.group()), sentence)
    numbers = []
    for m in _NUMBER.finditer(text):
        frac = m.group("frac") or ""
        exp = int(m.group("exp") or 0)
        value = float(f"{m.group('int').replace(',', '')}.{frac or '0'}") * 10.0**exp
        unit = (m.group("unit") or "").strip()
        numbers.append(
            _Number(
                token=m.group().strip(),
                value=value,
                percent=unit == "%" or unit.endswith("cent"),
                half_unit=0.5 * 10.0 ** (exp - len(frac)),
            )
        )
    return numbers


def _evidence_numbers(item: EvidenceLike | Mapping[str, Any]) -> list[_Number]:
    if isinstance(item, Mapping):
        raw_values: Any = item.get("values", ())
        summary = str(item.get("summary", "") or "")
    else:
        raw_values, summary = item.values, item.summary
    if isinstance(raw_values, int | float):
        raw_values = (raw_values,)
    numbers = [
        _Number(str(v), float(v), False, 0.0)
        for v in raw_values
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]
    for m in _EVIDENCE_NUMBER.finditer(summary):
        numbers.append(_Number(m.group(), float(m.group(1)), bool(m.group(2)), 0.0))
    return numbers


def _scaled(claim: _Number, known: _Number) -> Iterator[float]:
    """An evidence number in the claim's scale: as is, and as ratio ↔ percentage."""
    yield known.value
    if claim.percent and not known.percent:
        yield known.value * 100.0
    if known.percent and not claim.percent:
        yield known.value / 100.0


def _supported(claim: _Number, pool: Iterable[_Number], tolerance: float) -> bool:
    said = abs(claim.value)
    for known in pool:
        for value in _scaled(claim, known):
            diff = abs(said - abs(value))
            if diff <= tolerance * max(said, abs(value)) or diff <= claim.half_unit * (1 + 1e-9):
                return True
    return False


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _sentences(text: str, cite: re.Pattern[str]) -> list[tuple[int, int]]:
    """Spans of the draft's sentences (see the module docstring)."""
    spans: list[tuple[int, int]] = []
    for line in _LINE.finditer(text):
        marker = _MARKER.match(line.group())
        pos = line.start() + (marker.end() if marker else 0)
        cuts = [(pos, line.end())]
        for brk in _SENTENCE_BREAK.finditer(text, pos, line.end()):
            cuts[-1] = (cuts[-1][0], brk.start())
            cuts.append((brk.end(), line.end()))
        first = len(spans)
        for start, end in cuts:
            start, end = _trim(text, start, end)
            if start == end:
                continue
            rest = _REFERENCE.sub(" ", cite.sub(" ", text[start:end]))
            if len(spans) > first and not any(c.isalnum() for c in rest):
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
    return spans


def _strip(text: str, spans: Collection[tuple[int, int]]) -> str:
    """The draft without the given sentence spans; lines left empty (or a bare marker) go."""
    gone = [False] * len(text)
    for start, end in spans:
        gone[start:end] = [True] * (end - start)
    out: list[str] = []
    for line in re.finditer(r"[^\n]+\n?|\n", text):
        original = line.group()
        if not any(gone[line.start() : line.end()]):
            out.append(original)
            continue
        kept = "".join(c for i, c in enumerate(original, line.start()) if not gone[i])
        indent = original[: len(original) - len(original.lstrip())]
        body = indent + re.sub(r"[ \t]{2,}", " ", kept.strip())
        marker = _MARKER.match(body + " ")
        if body.strip() and not (marker and marker.end() >= len(body)):
            out.append(body + original[len(original.rstrip("\r\n")) :])
    return "".join(out)


def _compile_citation(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise GuardrailPolicyError(
            f"grounding evidence_id_pattern does not compile: {exc}"
        ) from None


def _cited_id(match: re.Match[str]) -> str:
    if match.re.groups and match.group(1) is not None:
        return match.group(1)
    token = match.group()
    return token[1:-1] if token.startswith("[") and token.endswith("]") else token


class _Checker:
    """The checks of one draft, with the evidence numbers read once per cited id."""

    def __init__(
        self,
        evidence: Mapping[str, EvidenceLike | Mapping[str, Any]],
        references: Collection[str],
        policy: GroundingPolicy,
    ) -> None:
        self.evidence = evidence
        self.references = references
        self.policy = policy
        self.cite = _compile_citation(policy.evidence_id_pattern)
        self._numbers: dict[str, list[_Number]] = {}

    def numbers(self, eid: str) -> list[_Number]:
        if eid not in self._numbers:
            self._numbers[eid] = _evidence_numbers(self.evidence[eid])
        return self._numbers[eid]

    def sentence(self, sentence: str) -> list[GroundingIssue]:
        policy = self.policy
        found: list[tuple[IssueKind, str]] = []
        citations = list(self.cite.finditer(sentence))
        known = [_cited_id(m) for m in citations if _cited_id(m) in self.evidence]
        found += [
            ("unknown_evidence", m.group()) for m in citations if _cited_id(m) not in self.evidence
        ]
        if policy.require_reference_ids:
            found += [
                ("unknown_reference", m.group())
                for m in _REFERENCE.finditer(sentence)
                if m.group(1) not in self.references
            ]
        claims = _claims(_REFERENCE.sub(" ", self.cite.sub(" ", sentence)))
        if not citations and policy.require_evidence_ids:
            found += [("uncited_number", claim.token) for claim in claims]
        if known and policy.require_number_match:
            pool = [n for eid in known for n in self.numbers(eid)]
            found += [
                ("number_mismatch", claim.token)
                for claim in claims
                if not _supported(claim, pool, policy.number_tolerance)
            ]
        return [GroundingIssue(kind, sentence, token) for kind, token in found]


def check_grounding(
    text: str,
    evidence: Mapping[str, EvidenceLike | Mapping[str, Any]],
    references: Collection[str],
    policy: GroundingPolicy,
) -> GroundingReport:
    """Check a draft against its evidence (id → item) and the known reference ids.

    ``references`` may be ``pack.references`` itself (its keys are the ids).
    """
    checker = _Checker(evidence, references, policy)
    issues: list[GroundingIssue] = []
    bad: list[tuple[int, int]] = []
    for start, end in _sentences(text, checker.cite):
        found = checker.sentence(text[start:end])
        if found:
            issues += found
            bad.append((start, end))
    if issues and policy.unsupported_claim == "reject":
        raise UngroundedError(GroundingReport(False, tuple(issues), text))
    if issues and policy.unsupported_claim == "strip":
        removed = tuple(text[s:e] for s, e in bad)
        return GroundingReport(False, tuple(issues), _strip(text, bad), removed)
    return GroundingReport(not issues, tuple(issues), text)


def cite_numbers(
    text: str,
    evidence: Mapping[str, EvidenceLike | Mapping[str, Any]],
    policy: GroundingPolicy,
) -> tuple[str, int]:
    """Cite, for a model that states numbers but does not cite, the evidence they come from.

    A sentence with numbers and no citation gets ``[id]`` before its full stop, for the first
    evidence item (in ``evidence``'s order) whose numbers support every one of them, as
    :func:`check_grounding` would judge it. A sentence holding a bare integer under 10 (a
    count, a list position: too easily matched by chance) is left alone, as is one no single
    item supports: the check then reports it as uncited. Returns the text and how many
    citations were added. The check itself is unchanged: a number still has to match.

    >>> from knowledge.pack import load_pack
    >>> ev = {"ev-a": {"values": (0.92,), "summary": "x"}, "ev-b": {"values": (0.452,)}}
    >>> cite_numbers("Timeouts hit 45 %. Then 2 AMFs left. Nothing else.", ev,
    ...              load_pack().grounding)
    ('Timeouts hit 45 % [ev-b]. Then 2 AMFs left. Nothing else.', 1)
    """
    checker = _Checker(evidence, (), policy)
    added: list[tuple[int, str]] = []
    for start, end in _sentences(text, checker.cite):
        sentence = text[start:end]
        if checker.cite.search(sentence):
            continue
        claims = _claims(_REFERENCE.sub(" ", sentence))
        if not claims or any(
            not c.percent and c.half_unit >= 0.5 and abs(c.value) < 10 for c in claims
        ):
            continue
        for eid in evidence:
            pool = checker.numbers(eid)
            if all(_supported(c, pool, policy.number_tolerance) for c in claims):
                at = end - 1 if sentence[-1] in ".!?" else end  # before the full stop
                added.append((at, f" [{eid}]"))
                break
    for end, cite in reversed(added):
        text = text[:end] + cite + text[end:]
    return text, len(added)
