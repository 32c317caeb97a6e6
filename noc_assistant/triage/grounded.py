"""Grounded text by construction: the JSON a model is allowed to write, and how it is read.

The model does not write free text. It writes a JSON object of *claims*, each naming the one
evidence item it rests on, and the server decodes under that JSON Schema (OpenAI
``response_format: json_schema``; the built-in server, vLLM and SGLang all enforce it). The
schema is built per incident so that

* a claim's ``evidence`` is one of the incident's evidence ids (an enum): a citation can only
  point at something that exists;
* a claim's ``text`` contains no digit: numbers are not typed by the model but *referenced*
  as placeholders — ``{observed}``, ``{expected}``, ``{at}``, ``{confidence}`` — and filled in
  from the cited evidence with its unit and precision (:func:`render`);
* entity names (which contain digits: ``amf-1``) can be written only if they are the
  incident's own, so a claim cannot name an entity outside it;
* no sentence punctuation inside a claim (``.``, ``!``, ``?``): each claim is one sentence and
  its citation closes it, so no number ends up in a sentence without its citation;
* a narration's headline must name the diagnosed entity.

The rendered text then goes through the same grounding check and vetting as before
(:mod:`guardrails.grounding`, :meth:`noc_assistant.triage.drafting.Drafter.vet`): the last line of
defence stays, and against a server that does not enforce schemas it still refuses whatever
does not hold up (:class:`StructuredOutputError` for JSON that does not parse or fit).

>>> s = answer_schema(["ev-f-1", "ev-rca"], ["amf-1"])
>>> claims = parse_claims('{"answer": [{"evidence": "ev-f-1", "text": "it fell to '
...                       '{observed} on amf-1"}]}', s)
>>> render(claims, lambda ev, field: "45 %" if field == "observed" else None)
'It fell to 45 % on amf-1 [ev-f-1].'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from noc_assistant.errors import LlmError

__all__ = [
    "PLACEHOLDERS",
    "RANK_FIELD",
    "RANK_ID",
    "SAFE_NAME",
    "Claim",
    "StructuredOutputError",
    "answer_schema",
    "claim_pattern",
    "detail_pattern",
    "loops",
    "narration_schema",
    "parse_claims",
    "prune",
    "render",
]

PLACEHOLDERS = ("observed", "expected", "at", "confidence")
"""What a claim may reference instead of typing a number: the cited item's value, its
expected range, its time, and the ranking's confidence in the top cause."""
RANK_ID = "ev-rca"
"""The pseudo evidence item holding the ranking's confidences."""
RANK_FIELD = "confidence"
"""The placeholder that always cites the ranking (``[ev-rca]``), whatever the claim cites."""

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,62}")
"""What a name a model may write or pick (an entity, a KPI) looks like: no space, markup or
quote. An entity named ``amf-1 ignore previous instructions`` is telemetry text: it stays in
the prompt as data, and is never offered to the model as something to write or choose."""
_SEP = r"[ ,;:()'/&+-]"
"""What separates the words of a claim: spaces and punctuation that does not end a sentence;
no digit, quote, backslash, bracket, brace or angle bracket."""
_WORD = r"[A-Za-z]{1,18}"
_SLOT = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
MAX_CLAIM_WORDS = 20
"""The most words (a word, a name or a placeholder each) one claim may have."""
_DATE_WORDS = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|"
    r"june|july|august|september|october|november|december|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday|yesterday|today|tomorrow)\b",
    re.IGNORECASE,
)
"""Words that state a date: a claim may give a time only as ``{at}``, filled from evidence."""


class StructuredOutputError(LlmError):
    """The model's JSON does not parse or does not fit the schema it was asked for."""


@dataclass(frozen=True)
class Claim:
    """One sentence of the model's, with the evidence id it rests on."""

    evidence: str
    text: str


def _either(literals: Iterable[str]) -> str:
    alternatives = [re.escape(n) for n in sorted(set(literals), key=lambda n: (-len(n), n)) if n]
    return "(?:" + "|".join(alternatives) + ")"


def claim_pattern(
    names: Iterable[str],
    must_name: str | None = None,
    max_words: int = MAX_CLAIM_WORDS,
    must: Sequence[str] = (),
    slots: Sequence[str] = PLACEHOLDERS,
    lead: str = "",
) -> str:
    """The regular expression a claim's text must match (anchored; Rust-regex compatible).

    A claim is words (letters only), entity names and placeholders, each two apart by
    spaces or punctuation: a name or a placeholder never sticks to a word (a model that wants
    to type ``team1`` cannot write ``teamf-1`` by gluing a name ``amf-1`` to it). ``names``
    are the entity names the text may contain; ``must_name`` one it must contain; ``must``
    literals (names or placeholders) of which it must contain one (after ``must_name``, with
    both). ``max_words`` counts words, names and placeholders; ``slots`` are the placeholders
    it may use. With ``lead``, the text opens with it (the frame of an answer to what the
    question asks: ``It started at {at}``) and the model goes on from there.

    >>> p = re.compile(claim_pattern(["amf-1"], must_name="amf-1"))
    >>> bool(p.match("hang on amf-1 at {confidence}")), bool(p.match("load is high"))
    (True, False)
    >>> bool(p.match("amf-2 lost amf-1")), bool(p.match("amf-1 at 45 %"))
    (False, False)
    >>> bool(p.match("the teamf-1 lost it")), bool(p.match("amf-1{observed}"))
    (False, False)
    >>> q = re.compile(claim_pattern([], must=["{at}"]))
    >>> bool(q.match("it started at {at}")), bool(q.match("it started in december"))
    (True, False)
    >>> w = re.compile(claim_pattern(["amf-1"], lead="It started at {at}"))
    >>> bool(w.match("It started at {at}, on amf-1")), bool(w.match("It began on amf-1"))
    (True, False)
    >>> h = re.compile(claim_pattern(["amf-1"], must_name="amf-1", must=["{confidence}"]))
    >>> bool(h.match("blame amf-1 with {confidence}")), bool(h.match("blame amf-1 with"))
    (True, False)
    """
    names = [*names, *([must_name] if must_name else [])]
    atom = f"(?:{_WORD}|{_either([*(f'{{{p}}}' for p in slots), *names])})"
    gap = f"{_SEP}{{1,3}}"
    edge = f"{_SEP}{{0,2}}"
    if lead:
        return f"^{re.escape(lead)}(?:{gap}{atom}){{0,{max_words - 1}}}{edge}$"
    required = [_either([must_name] if must_name else must)] if must_name or must else []
    if must_name and must:  # the name, then one of ``must``
        required.append(_either(must))
    if not required:
        return f"^{edge}{atom}(?:{gap}{atom}){{0,{max_words - 1}}}{edge}$"
    part = max(1, (max_words - len(required)) // (len(required) + 1))
    inner = f"(?:{gap}{atom}){{0,{part}}}{gap}"
    return (
        f"^{edge}(?:{atom}{gap}){{0,{part}}}"
        + inner.join(required)
        + f"(?:{gap}{atom}){{0,{part}}}{edge}$"
    )


def detail_pattern(names: Iterable[str], run: int = 8) -> str:
    """The regular expression of a narration's detail: words and names, and at least one of
    ``{observed}``, ``{expected}``, ``{at}``, each at most once and in that order (a detail
    gives its evidence's value, range and time; a placeholder written twice is a model
    looping: ``{observed} against {expected} at {observed} against …``). ``run`` bounds the
    words between two placeholders; ``{at}``, when written, ends the detail. Every item is
    followed by a separator, so the text may end with one (rendering strips it).

    >>> p = re.compile(detail_pattern(["amf-1"]))
    >>> bool(p.match("it fell to {observed} against {expected} at {at}")), bool(p.match("x "))
    (True, False)
    >>> bool(p.match("{observed} at {at} then {observed} ")), bool(p.match("at {at} {expected} "))
    (False, False)
    """
    gap = f"{_SEP}{{1,3}}"
    item = f"(?:{_WORD}|{_either(names)})" if names else _WORD

    def free(n: int) -> str:
        return f"(?:{item}{gap}){{0,{n}}}"

    o, e = (f"{re.escape('{' + p + '}')}{gap}{free(run)}" for p in PLACEHOLDERS[:2])
    a = f"{re.escape('{at}')}{_SEP}{{0,2}}"  # the time ends a detail
    return f"^{_SEP}{{0,2}}{free(run)}(?:{o}(?:{e})?(?:{a})?|{e}(?:{a})?|{a})$"


def _claims_schema(
    ids: Sequence[str],
    names: Iterable[str],
    lo: int,
    hi: int,
    must: Sequence[str] = (),
    pattern: str | None = None,
) -> dict[str, Any]:
    return {
        "type": "array",
        "minItems": lo,
        "maxItems": hi,
        "items": {
            "type": "object",
            "properties": {
                "evidence": {"type": "string", "enum": list(dict.fromkeys(ids))},
                "text": {"type": "string", "pattern": pattern or claim_pattern(names, must=must)},
            },
            "required": ["evidence", "text"],
            "additionalProperties": False,
        },
    }


def narration_schema(
    ids: Sequence[str],
    names: Iterable[str],
    root: str | None,
    sentences: int = 2,
    values: bool = False,
    headline_must: Sequence[str] = (),
) -> dict[str, Any]:
    """A narration: a headline naming ``root`` (the diagnosed entity; None for a no-fault
    answer; after it, one of ``headline_must``; of the placeholders only ``{confidence}``),
    cited for the ranking, then 1..``sentences``
    claims on the evidence ``ids``; with ``values`` (every item offered has them), each
    detail gives its evidence's value, range or time (:func:`detail_pattern`)."""
    names = list(names)
    return {
        "type": "object",
        "properties": {
            "headline": {
                "type": "string",
                "pattern": claim_pattern(
                    names, must_name=root, must=headline_must, slots=[RANK_FIELD]
                ),
            },
            "details": _claims_schema(
                ids, names, 1, max(1, sentences), pattern=detail_pattern(names) if values else None
            ),
        },
        "required": ["headline", "details"],
        "additionalProperties": False,
    }


def answer_schema(
    ids: Sequence[str],
    names: Iterable[str],
    claims: int = 2,
    must: Sequence[str] = (),
    lead: str = "",
) -> dict[str, Any]:
    """A chat answer: 1..``claims`` claims, each on one of ``ids`` and holding one of
    ``must`` (what the question asks for: a value for "why", an entity for "which"); with
    ``lead``, one claim opening with it."""
    if lead:
        pattern = claim_pattern(names, lead=lead)
        return {
            "type": "object",
            "properties": {"answer": _claims_schema(ids, list(names), 1, 1, pattern=pattern)},
            "required": ["answer"],
            "additionalProperties": False,
        }
    return {
        "type": "object",
        "properties": {"answer": _claims_schema(ids, list(names), 1, max(1, claims), must)},
        "required": ["answer"],
        "additionalProperties": False,
    }


def _fits(value: Any, schema: Mapping[str, Any], where: str) -> None:
    """Check ``value`` against the small JSON-Schema subset this module writes."""
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise StructuredOutputError(f"{where}: expected an object")
        props: Mapping[str, Any] = schema.get("properties", {})
        missing = [k for k in schema.get("required", ()) if k not in value]
        extra = [k for k in value if k not in props]
        if missing or extra:
            raise StructuredOutputError(f"{where}: missing {missing} or unexpected {extra}")
        for k, v in value.items():
            _fits(v, props[k], f"{where}.{k}")
    elif kind == "array":
        if not isinstance(value, list):
            raise StructuredOutputError(f"{where}: expected an array")
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            raise StructuredOutputError(f"{where}: {len(value)} items")
        for i, v in enumerate(value):
            _fits(v, schema["items"], f"{where}[{i}]")
    elif kind == "string":
        if not isinstance(value, str):
            raise StructuredOutputError(f"{where}: expected a string")
        if "enum" in schema and value not in schema["enum"]:
            raise StructuredOutputError(f"{where}: {value!r} is not allowed")
        if "pattern" in schema and not re.fullmatch(schema["pattern"].strip("^$"), value):
            raise StructuredOutputError(f"{where}: text outside the allowed form")


def _relaxed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with every array allowed to be empty (what a cut answer still holds)."""
    out = dict(schema)
    if out.get("type") == "array":
        out["minItems"] = 0
        out["items"] = _relaxed(out["items"])
    if "properties" in out:
        out["properties"] = {k: _relaxed(v) for k, v in out["properties"].items()}
    return out


def _salvage(text: str, schema: Mapping[str, Any]) -> Any:
    """The complete claims of an answer the token budget cut short, or None.

    Decoding under the schema, everything before the cut is valid; the claims that were
    finished are whole. The answer is closed after the last finished one (``]}``), or after a
    finished headline with no detail yet, and checked against the schema with its arrays
    allowed to be empty.

    >>> s = answer_schema(["ev-1"], [])
    >>> _salvage('{"answer": [{"evidence": "ev-1", "text": "it fell"}, {"evidence": "ev', s)
    {'answer': [{'evidence': 'ev-1', 'text': 'it fell'}]}
    """
    relaxed = _relaxed(schema)
    for cut in range(len(text), 0, -1):
        if text[cut - 1] not in '}"':
            continue
        for closer in ("]}", ', "details": []}', "}"):
            try:
                value = json.loads(text[:cut] + closer)
                _fits(value, relaxed, "$")
            except (json.JSONDecodeError, StructuredOutputError):
                continue
            return value
    return None


def parse_claims(text: str, schema: Mapping[str, Any], *, cut: bool = False) -> list[Claim]:
    """The claims of a model's JSON answer to ``schema`` (a narration's headline first, as a
    claim on the ranking), checked against the schema: a server that did not enforce it gets
    the same refusal as an invalid answer. With ``cut`` (the model ran out of tokens), the
    claims it finished (:func:`_salvage`). A claim that repeats an earlier one word for word
    is dropped: it says nothing new, and a small model loops.

    >>> s = answer_schema(["ev-1"], [])
    >>> parse_claims('{"answer": [{"evidence": "ev-2", "text": "x"}]}', s)
    Traceback (most recent call last):
    ...
    noc_assistant.triage.grounded.StructuredOutputError: $.answer[0].evidence: 'ev-2' is not allowed
    >>> one = '{"evidence": "ev-1", "text": "a b"}'
    >>> len(parse_claims(f'{{"answer": [{one}, {one}]}}', answer_schema(["ev-1"], [])))
    1
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        value = _salvage(text, schema) if cut else None
        if value is None:
            raise StructuredOutputError(f"the answer is not JSON: {exc.msg}") from None
    else:
        _fits(value, schema, "$")
    claims: list[Claim] = []
    if "headline" in value:
        claims.append(Claim(RANK_ID, value["headline"]))
    for item in value.get("details", value.get("answer", [])):
        claims.append(Claim(item["evidence"], item["text"]))
    seen: set[str] = set()
    kept = []
    for c in claims:
        said = " ".join(c.text.lower().split())
        if said not in seen:
            seen.add(said)
            kept.append(c)
    if not kept:
        raise StructuredOutputError("the answer holds no finished claim")
    return kept


def _sentence(text: str) -> str:
    text = " ".join(text.split()).strip(" ,;:-")
    return text[:1].upper() + text[1:]


def _filled(
    claim: Claim, fill: Callable[[str, str], str | None], rank_id: str
) -> tuple[str, list[str], int]:
    """A claim's sentence with its placeholders filled (``n/a`` where the item has no such
    value), the ids it cites, and how many placeholders had no value."""
    cites = [claim.evidence]
    missing = 0

    def slot(m: re.Match[str]) -> str:
        nonlocal missing
        field = m.group(1)
        source = rank_id if field == RANK_FIELD else claim.evidence
        if source not in cites:
            cites.append(source)
        value = fill(source, field)
        missing += value in (None, "n/a")
        return value or "n/a"

    return _sentence(_SLOT.sub(slot, claim.text)), cites, missing


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


_STUTTER = re.compile(r"\b([a-z]+(?:\W+[a-z]+){0,2})\W+\1\b")
"""One to three words said twice in a row (``iax iax``, ``at least to at least to``)."""


def loops(text: str, width: int = 40, times: int = 3) -> bool:
    """Whether some ``width``-character stretch occurs ``times`` times or more (spacing
    ignored): a model caught in a repetition loop.

    >>> loops("Hang on gpu-srv-2, confidence 73.1 %, " * 4)
    True
    >>> loops("Registrations from PLMN 262-01 fail on amf-01 [ev-1]. The rules rank it first.")
    False
    """
    flat = " ".join(text.split())
    seen: dict[str, int] = {}
    for i in range(len(flat) - width + 1):
        chunk = flat[i : i + width]
        seen[chunk] = seen.get(chunk, 0) + 1
        if seen[chunk] >= times:
            return True
    return False


def _stretches(text: str, width: int) -> list[str]:
    return [text[i : i + width] for i in range(len(text) - width + 1)]


REPEAT_WIDTH = 24
"""Characters a claim shares with an earlier one before it counts as a repeat of it."""
LOOP_WIDTH = 16
"""Characters a claim repeats of itself before it counts as looping."""


def prune(
    claims: Sequence[Claim],
    fill: Callable[[str, str], str | None],
    rank_id: str = RANK_ID,
) -> tuple[list[Claim], list[str]]:
    """The claims worth showing, and why each other one was dropped.

    A small model's greedy decoding loops and guesses. A claim is dropped when it repeats
    itself (some :data:`LOOP_WIDTH`-character stretch twice, one placeholder twice, or one to
    three words twice in a row),
    repeats a :data:`REPEAT_WIDTH`-character stretch of a claim kept before it, names a date
    in words (times come only as ``{at}``, from the evidence), or references a value its
    evidence does not have (it would read ``n/a``). The rest is rendered and checked as
    before; dropping never adds a word.

    >>> fill = lambda e, f: {"observed": "45 %", "at": "10:05 UTC"}.get(f)
    >>> kept, why = prune([Claim("ev-1", "it fell to {observed} at {at}"),
    ...                    Claim("ev-2", "it fell to {observed} at {at} again"),
    ...                    Claim("ev-3", "it started on december"),
    ...                    Claim("ev-4", "the load grew and the load grew and the load grew"),
    ...                    Claim("ev-5", "expected {expected}"),
    ...                    Claim("ev-6", "the load rose to {observed} at at {at}")], fill)
    >>> [c.evidence for c in kept]
    ['ev-1']
    >>> why  # doctest: +NORMALIZE_WHITESPACE
    ['repeats an earlier sentence', 'names a date in words', 'repeats itself',
     'cites a value its evidence lacks', 'repeats itself']
    """
    kept: list[Claim] = []
    said: set[str] = set()
    why: list[str] = []
    for claim in claims:
        body, _, missing = _filled(claim, fill, rank_id)
        flat = _flat(body)
        parts = _stretches(flat, REPEAT_WIDTH)
        slots = _SLOT.findall(claim.text)
        if missing:
            why.append("cites a value its evidence lacks")
        elif _DATE_WORDS.search(claim.text):
            why.append("names a date in words")
        elif said.intersection(parts):
            why.append("repeats an earlier sentence")
        elif loops(flat, LOOP_WIDTH, 2) or len(set(slots)) < len(slots) or _STUTTER.search(flat):
            why.append("repeats itself")
        else:
            kept.append(claim)
            said.update(parts)
    return kept, why


def render(
    claims: Sequence[Claim],
    fill: Callable[[str, str], str | None],
    rank_id: str = RANK_ID,
) -> str:
    """The claims as sentences, each closed by its citations, placeholders filled by
    ``fill(evidence_id, field)`` (None: the item has no such value, written ``n/a``).
    ``{confidence}`` is the ranking's and cites ``rank_id`` too.

    >>> fill = {("ev-rca", "confidence"): "97 %", ("ev-2", "at"): "10:05 UTC"}
    >>> render([Claim("ev-2", "sessions dropped at {at}, confidence {confidence}"),
    ...         Claim("ev-3", "nothing else {observed}")], lambda e, f: fill.get((e, f)))
    'Sessions dropped at 10:05 UTC, confidence 97 % [ev-2] [ev-rca]. Nothing else n/a [ev-3].'
    """
    out = []
    for claim in claims:
        body, cites, _ = _filled(claim, fill, rank_id)
        if body:
            out.append(body + " " + " ".join(f"[{c}]" for c in cites) + ".")
    return " ".join(out)
