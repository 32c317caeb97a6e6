"""How numbers are shown to a person: KPI values with their units, expected bands, severities.

Detectors and the rules work on raw floats (a success ratio of 0.902439, a band of
``-4.859e-12..4.979e-12``, a score of ``53868250532371.6``); a report, an e-mail or a table
shows them in the KPI's unit (``knowledge/kpis/*.yaml`` ``unit:``) at a precision a person
reads, and always so that the grounding check (:mod:`guardrails.grounding`) still matches the
number written against the evidence value it came from: a number written must round back to
that value at its written precision (or lie within the policy's tolerance), ``45 %`` matches
0.45, digits grouped by thousands (``2,275``) read as one number, and times of day are not
numbers at all.

=============  =================================  =========================================
unit           shown as                           why
=============  =================================  =========================================
``ratio``      ``90.2 %``, ``0.042 %``, ``99.96 %`` one decimal; more where one decimal would
                                                  round a value that is not 0 or 1 to 0 or
                                                  100 % (a success ratio of 0.9996 is not a
                                                  success ratio of 1)
``%``          ``45.2 %``                         already a percentage
``count``      ``2,275``                          whole numbers (a mean over a window is
                                                  still a count), grouped by thousands
``s``          ``3.2 s``, ``125 ms``              sub-second durations in milliseconds; a
                                                  value past 10⁹ s is a point in time
                                                  (a process start time): shown as UTC
``1/s``        ``15.3/s``                         a rate
``B/s``        ``12.3 MB/s``                      decimal prefixes (k, M, G)
``bool``       ``yes`` / ``no``
``code``       ``79``                             an identifier (an Xid), never grouped
``C``          ``71 °C``
other          ``345 MHz``, ``0.42 J``, ``512 tokens``  three significant digits and the unit
=============  =================================  =========================================

Bands are clipped to what the quantity can physically be (a ratio lies in [0, 1]; counts,
rates, durations, sizes are never negative): a bound at or beyond the physical limit says
nothing and is left out (``at least 61.3 %`` rather than ``61.3 %..132.5 %``; ``at most
10.1 %`` rather than ``-9.4 %..10.1 %``). Magnitudes under 10⁻⁹ (floating-point dust of a
band fitted on a series that is always 0) are 0.

The scaled forms (``125 ms``, ``12.3 MB/s``) are written for reading: grounding matches them
only against a text that wrote them too (the evidence summaries of :mod:`noc_assistant.triage.rca`
do). :func:`placeholder`, which fills numbers into a model's text, writes the unscaled forms
(``0.125 s``), which match the evidence item's values alone, and checks that they do.

A KPI is given as its definition (:class:`~knowledge.kpis.KpiDef`), as a KPI id of the
default knowledge pack, or as a unit itself (``"ratio"``); anything else (a raw metric's name)
is a plain number without a unit.

>>> value("amf-registration-success-by-plmn", 0.902439), band("ratio", 0.613, 1.325)
('90.2 %', 'at least 61.3 %')
>>> value("count", 2275.0), band("count", 2318.2, 2395.4), band("ratio", -4.859e-12, 4.979e-12)
('2,275', '2,318–2,395', '0 %')
>>> severity(53868250532371.6), severity(1.0), severity(0.0)
('97/100', '50/100', '0/100')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal

from guardrails.grounding import check_grounding
from knowledge.kpis import KpiDef, load_kpis
from knowledge.schema import GroundingPolicy
from noc_assistant.models import Evidence

__all__ = [
    "FIELDS",
    "NO_VALUE",
    "Kpi",
    "Position",
    "band",
    "excess",
    "placeholder",
    "position",
    "severity",
    "severity_index",
    "template_helpers",
    "unit_of",
    "value",
]

Kpi = KpiDef | str | None
"""A KPI definition, a KPI id of the default pack, a unit (``"ratio"``), or nothing."""
Position = Literal["below", "inside", "above"]
FIELDS = ("observed", "expected_low", "expected_high", "band", "start", "end")
"""What :func:`placeholder` renders of an evidence item."""
NO_VALUE = "n/a"
"""What is shown where an evidence item has no such value (an inventory link, an absence)."""

_TINY = 1e-9
_EPOCH = 1e9
"""A value in seconds past this is a point in time (2001 onwards), not a duration."""
_UNITS = frozenset(
    {"ratio", "%", "count", "s", "1/s", "B/s", "bool", "code", "C", "J", "W", "MHz", "tokens"}
    | {"tokens/s"}
)
_CEILING = {"ratio": 1.0, "%": 100.0, "bool": 1.0}
_SIGNED = frozenset({"C", ""})
"""Units whose values may be negative (a temperature; a raw metric we know nothing of)."""
_POLICY = GroundingPolicy()


@lru_cache(maxsize=1)
def _default_kpis() -> dict[str, KpiDef]:
    return load_kpis()


def unit_of(kpi: Kpi, kpis: Mapping[str, KpiDef] | None = None) -> str:
    """The unit of ``kpi`` (``kpis``: the definitions to look an id up in; default: the
    default pack's), ``""`` where it has none or is unknown.

    >>> unit_of("amf-registered-subscribers-by-plmn"), unit_of("ratio"), unit_of("nope")
    ('count', 'ratio', '')
    """
    if kpi is None:
        return ""
    if isinstance(kpi, KpiDef):
        return kpi.unit
    known = (kpis if kpis is not None else _default_kpis()).get(kpi)
    if known is not None:
        return known.unit
    return kpi if kpi in _UNITS else ""


def _clean(x: float) -> float:
    return 0.0 if abs(x) < _TINY else x


def _plain(x: float, digits: int = 3, grouping: bool = True) -> str:
    """``x`` at ``digits`` significant digits, trailing zeros dropped; from 1000 on a whole
    number (grouped by thousands with ``grouping``); exponent form only under 10⁻⁴ or past
    10¹⁵.

    >>> _plain(0.902439), _plain(15.33), _plain(2215.79), _plain(4.1234e-5), _plain(999.96)
    ('0.902', '15.3', '2,216', '4.12e-05', '1,000')
    """
    x = _clean(x)
    if x == 0.0:
        return "0"
    ax = abs(x)
    if ax >= 1e15 or ax < 1e-4:
        return f"{x:.{digits - 1}e}"
    if ax >= 999.5:
        return f"{round(x):,}" if grouping else str(round(x))
    decimals = max(0, digits - 1 - math.floor(math.log10(ax)))
    text = f"{x:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _percent(ratio: float) -> str:
    """A ratio as a percentage: one decimal, more where one decimal would show a value that
    is not 0 or 1 as 0 or 100 %.

    >>> _percent(0.902439), _percent(0.02), _percent(0.99996), _percent(0.00042), _percent(1.0)
    ('90.2 %', '2 %', '99.996 %', '0.042 %', '100 %')
    """
    p = 100.0 * _clean(ratio)
    if p != 0.0 and abs(p) < 0.1:
        return f"{_plain(p, 2)} %"
    decimals = 1
    text = f"{p:.1f}"
    while decimals < 4 and 0.0 < abs(p) < 100.0 and float(text) in (0.0, 100.0, -100.0):
        decimals += 1
        text = f"{p:.{decimals}f}"
    text = text.rstrip("0").rstrip(".")
    return f"{'0' if text == '-0' else text} %"


def _when(ts: float, seconds: bool = False) -> str:
    fmt = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return datetime.fromtimestamp(ts, UTC).strftime(fmt) + " UTC"


def _render(unit: str, x: float, scaled: bool, grouping: bool) -> str:
    if not math.isfinite(x):
        return NO_VALUE
    x = _clean(x)
    if unit == "ratio":
        return _percent(x)
    if unit == "%":
        return _percent(x / 100.0)
    if unit == "count":
        return f"{round(x):,}" if grouping else str(round(x))
    if unit == "code":
        return str(round(x))
    if unit == "bool":
        return "yes" if x >= 0.5 else "no"
    if unit == "s":
        if abs(x) >= _EPOCH:
            return _when(x, seconds=True)
        if scaled and 0.0 < abs(x) < 1.0:
            return f"{_plain(1000.0 * x, grouping=grouping)} ms"
        return f"{_plain(x, grouping=grouping)} s"
    if unit == "1/s":
        return f"{_plain(x, grouping=grouping)}/s"
    if unit == "B/s" and scaled:
        for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(x) >= factor:
                return f"{_plain(x / factor)} {prefix}B/s"
    if unit == "B/s":
        return f"{_plain(x, grouping=grouping)} B/s"
    shown = "°C" if unit == "C" else unit
    number = _plain(x, grouping=grouping)
    return f"{number} {shown}" if shown else number


def value(kpi: Kpi, x: float, *, grouping: bool = True) -> str:
    """``x``, a value of ``kpi``, as a person reads it (see the module docstring); without
    ``grouping`` thousands are not grouped (a text whose numbers are read back as evidence:
    grounding reads ``2,275`` in evidence as two numbers).

    >>> value("ratio", 0.635294), value("s", 0.0421), value("s", 3.25), value("1/s", 15.33)
    ('63.5 %', '42.1 ms', '3.25 s', '15.3/s')
    >>> value("B/s", 12_345_678.0), value("C", 71.4), value("bool", 0.0), value(None, 2.5e-13)
    ('12.3 MB/s', '71.4 °C', 'no', '0')
    >>> value("nf-process-start-time", 1_767_614_400.0), value("count", 2177.0, grouping=False)
    ('2026-01-05 12:00:00 UTC', '2177')
    """
    return _render(unit_of(kpi), x, scaled=True, grouping=grouping)


def _bounds(unit: str) -> tuple[float, float]:
    floor = -math.inf if unit in _SIGNED or unit not in _UNITS else 0.0
    return floor, _CEILING.get(unit, math.inf)


def _band(unit: str, low: float, high: float, scaled: bool, grouping: bool) -> str:
    if not (math.isfinite(low) or math.isfinite(high)) or math.isnan(low) or math.isnan(high):
        return NO_VALUE
    lo, hi = sorted((_clean(low), _clean(high)))
    floor, ceiling = _bounds(unit)

    def show(x: float) -> str:
        return _render(unit, x, scaled, grouping)

    lo_c, hi_c = min(max(lo, floor), ceiling), max(min(hi, ceiling), floor)
    if show(lo_c) == show(hi_c):
        return show(hi_c if hi <= ceiling else lo_c)
    if unit == "bool":
        return "yes or no"
    open_low, open_high = lo <= floor, hi >= ceiling
    if open_low and open_high:
        return "any value"
    if open_high:
        return f"at least {show(lo)}"
    if open_low:
        return f"at most {show(hi)}"
    low_text, high_text = show(lo), show(hi)
    if lo >= 0.0 and low_text.replace(",", "").replace(".", "").isdigit():
        return f"{low_text}–{high_text}"  # bare numbers: 2,318–2,395
    return f"{low_text} to {high_text}"  # each with its unit: 84.1 % to 97 %


def band(kpi: Kpi, low: float, high: float, *, grouping: bool = True) -> str:
    """The expected band ``low``..``high`` of ``kpi`` as a person reads it, clipped to what
    the quantity can be (see the module docstring).

    >>> band("ratio", 0.841421, 0.97), band("ratio", -0.0945, 0.1008), band("ratio", -0.1, 1.2)
    ('84.1 % to 97 %', 'at most 10.1 %', 'any value')
    >>> band("count", 2215.79, 2369.35), band("count", -3.2, 4.6), band("s", 0.12, 0.25)
    ('2,216–2,369', 'at most 5', '120 ms to 250 ms')
    >>> band("smf-pfcp-peers", 1.0, 1.0), band("1/s", 4.086, 8.027), band(None, -2.0, 3.0)
    ('1', '4.09/s to 8.03/s', '-2 to 3')
    """
    return _band(unit_of(kpi), low, high, scaled=True, grouping=grouping)


def position(kpi: Kpi, x: float, low: float, high: float) -> Position:
    """Where ``x`` lies against its expected band: ``below``, ``above``, or ``inside`` it,
    also where it lies outside by less than the precision it is shown at (a line that said
    "92.1 %, under the 92.1 % expected" would contradict itself).

    >>> position("ratio", 0.75, 0.613, 1.325), position("ratio", 0.635, 0.841, 1.1)
    ('inside', 'below')
    >>> position("count", 2317.9, 2318.2, 2395.0), position("ratio", 0.3, -0.09, 0.1)
    ('inside', 'above')
    """
    unit = unit_of(kpi)
    lo, hi = sorted((low, high))
    if x < lo and _render(unit, x, True, True) != _render(unit, lo, True, True):
        return "below"
    if x > hi and _render(unit, x, True, True) != _render(unit, hi, True, True):
        return "above"
    return "inside"


def excess(kpi: Kpi, x: float, low: float, high: float) -> float:
    """How far ``x`` lies outside its expected band, in widths of the band (clipped to what
    the quantity can be: a success ratio's band does not widen past 100 %); 0 inside it. A
    band's width is how much the value normally moves, so this ranks evidence like a z-score
    does, across units. A band of no width (a peer count expected at exactly 1) counts in
    units of its bound's magnitude instead.

    >>> round(excess("count", 2275, 2318, 2395), 2), excess("ratio", 0.75, 0.613, 1.325)
    (0.56, 0.0)
    >>> round(excess("ratio", 0.635294, 0.841421, 1.10302), 2), excess("count", 0, 1, 1)
    (1.3, 1.0)
    """
    if position(kpi, x, low, high) == "inside":
        return 0.0
    floor, ceiling = _bounds(unit_of(kpi))
    lo, hi = sorted((low, high))
    lo_c, hi_c = min(max(lo, floor), ceiling), max(min(hi, ceiling), floor)
    bound = lo if x < lo else hi
    width = hi_c - lo_c
    scale = width if width > _TINY else max(abs(bound), _TINY)
    return abs(x - bound) / scale


def severity_index(score: float) -> int:
    """A detector score (unbounded, ≥ 0; 1 is the detector's own alarm bar) as a severity
    from 0 to 100: ``⌊100 · L / (1 + L)⌋`` with ``L = log₂(1 + score)``.

    Scores span orders of magnitude (a calibrated score of 2 and a CUSUM of 5·10¹³ both
    page), so the scale is logarithmic; it is bounded, never decreasing, 0 for no anomaly,
    exactly 50 at the alarm bar, 66 at three times it, 80 at fifteen times, and reaches 100
    only for an infinite score.

    >>> [severity_index(s) for s in (0.0, 0.5, 1.0, 3.0, 15.0, 154.0, 5.4e13, math.inf)]
    [0, 36, 50, 66, 80, 87, 97, 100]
    """
    if math.isnan(score) or score <= 0.0:
        return 0
    if math.isinf(score):
        return 100
    level = math.log2(1.0 + score)
    return min(99, math.floor(100.0 * level / (1.0 + level)))


def severity(score: float) -> str:
    """A detector score as a bounded severity a person reads (:func:`severity_index`).

    >>> severity(154.0)
    '87/100'
    """
    return f"{severity_index(score)}/100"


def _grounded(text: str, values: tuple[float, ...]) -> bool:
    pool = {"ev-x": {"values": values}}
    return check_grounding(f"{text} [ev-x].", pool, (), _POLICY).ok


def placeholder(evidence: Evidence, field: str, kpis: Mapping[str, KpiDef] | None = None) -> str:
    """One ``field`` of an evidence item (:data:`FIELDS`) as text a model's sentence may
    carry in place of a number: ``observed``, ``expected_low``, ``expected_high`` and
    ``band`` from its ``values`` (observed, expected low, expected high), ``start`` and
    ``end`` as UTC times. Total: an item without that value, or a field not in
    :data:`FIELDS`, gives :data:`NO_VALUE`. Grounding-safe: every number written matches
    the item's ``values`` under :func:`~guardrails.grounding.check_grounding` (unscaled
    units; where clipping a band would write a number the values do not hold, the raw
    band).

    >>> ev = Evidence(id="ev-f-1", entity="amf-1", kpi="amf-registration-success-by-plmn",
    ...               start=1_767_615_210.0, end=1_767_615_210.0, values=(0.635, 0.841, 1.10))
    >>> [placeholder(ev, f) for f in ("observed", "band", "start")]
    ['63.5 %', 'at least 84.1 %', '2026-01-05 12:13 UTC']
    >>> slow = ev.model_copy(update={"kpi": "sbi-udm-latency", "values": (0.125, 0.01, 0.05)})
    >>> placeholder(slow, "observed"), placeholder(slow, "band")
    ('0.125 s', '0.01 s to 0.05 s')
    >>> link = Evidence(id="ev-link-1", kind="inventory", entity="sepp-1", start=0.0, end=0.0)
    >>> placeholder(link, "observed"), placeholder(ev, "colour")
    ('n/a', 'n/a')
    """
    if field in ("start", "end"):
        ts = evidence.start if field == "start" else evidence.end
        return _when(ts) if math.isfinite(ts) else NO_VALUE
    index = {"observed": 0, "expected_low": 1, "expected_high": 2, "band": 2}.get(field)
    values = tuple(evidence.values)
    if index is None or len(values) <= index:
        return NO_VALUE
    unit = unit_of(evidence.kpi or None, kpis)
    if field == "band":
        text = _band(unit, values[1], values[2], scaled=False, grouping=True)
        if not _grounded(text, values):
            text = f"{_plain(min(values[1:3]))}–{_plain(max(values[1:3]))}"
    else:
        text = _render(unit, values[index], scaled=False, grouping=True)
        if not _grounded(text, values):
            text = _plain(values[index], digits=6)
    return text


def template_helpers() -> dict[str, Callable[..., str]]:
    """The functions a Jinja2 template (the web console's) calls to show numbers:
    ``kpi_value(kpi, x)``, ``kpi_band(kpi, low, high)``, ``percent(ratio)`` (a confidence, a
    share) and ``severity(score)``.

    >>> sorted(template_helpers())
    ['kpi_band', 'kpi_value', 'percent', 'severity']
    """
    return {
        "kpi_value": value,
        "kpi_band": band,
        "percent": lambda ratio: value("ratio", ratio),
        "severity": severity,
    }
