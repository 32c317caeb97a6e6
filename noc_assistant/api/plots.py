"""Evidence an engineer can see: one small SVG chart per KPI of an incident, drawn on the server.

Each chart shows, for one (entity, KPI) of the incident's findings: the observed values at the
findings' times (red where the finding paged, grey where it was evidence only), the expected
band the detectors held at those times (shaded, clipped to the unit's physical bounds: a ratio
stays in 0–100 %), the incident's span, and any maintenance window of that entity that overlaps
it. Values are labelled in the KPI's unit (:mod:`noc_assistant.triage.present`). The store keeps
findings, not whole series, so a chart draws the points the detectors flagged, and says so.

No JavaScript and no inline ``style`` (the console's Content-Security-Policy allows neither
without a nonce): presentation attributes only, text escaped.

>>> from noc_assistant.models import Finding, Incident
>>> inc = Incident(id="inc-1", fingerprint="x", opened_at=600.0, updated_at=900.0,
...                entities=["amf-1"], finding_ids=["f-1", "f-2"])
>>> fs = [Finding(id=f"f-{i}", detector="ensemble:point", kpi="amf-registration-success",
...               entity="amf-1", ts=600.0 + 300 * (i - 1), score=3.0, observed=0.80,
...               expected_low=0.97, expected_high=1.2, direction="down") for i in (1, 2)]
>>> [p] = evidence_plots(inc, fs, [])
>>> p.title, p.svg.startswith("<svg"), ">100 %</text>" in p.svg, "120 %" in p.svg
('amf-1 · amf-registration-success', True, True, False)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from markupsafe import Markup, escape

from knowledge.kpis import KpiDef
from noc_assistant.models import Finding, Incident, Maintenance
from noc_assistant.triage import present

__all__ = ["Plot", "evidence_plots", "sparkline", "topology_svg"]

#: chart size in SVG user units, and the margins for the value and time labels
WIDTH, HEIGHT = 560.0, 150.0
LEFT, RIGHT, TOP, BOTTOM = 78.0, 10.0, 10.0, 22.0
#: the most charts an incident page draws (its KPIs with the strongest findings first)
MAX_PLOTS = 8


@dataclass(frozen=True)
class Plot:
    """One chart: what it shows and its SVG markup."""

    entity: str
    kpi: str
    title: str
    svg: Markup


@dataclass(frozen=True)
class _Frame:
    """Data coordinates → SVG coordinates."""

    t0: float
    t1: float
    y0: float
    y1: float

    def x(self, t: float) -> float:
        span = self.t1 - self.t0 or 1.0
        return LEFT + (t - self.t0) / span * (WIDTH - LEFT - RIGHT)

    def y(self, v: float) -> float:
        span = self.y1 - self.y0 or 1.0
        clamped = min(max(v, self.y0), self.y1)
        return HEIGHT - BOTTOM - (clamped - self.y0) / span * (HEIGHT - TOP - BOTTOM)


def evidence_plots(
    incident: Incident,
    findings: Sequence[Finding],
    maintenance: Sequence[Maintenance],
    kpis: Mapping[str, KpiDef] | None = None,
) -> list[Plot]:
    """The incident's charts, one per (entity, KPI), strongest findings first."""
    groups: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for f in findings:
        if math.isfinite(f.observed) and math.isfinite(f.ts):
            groups[f.entity, f.kpi].append(f)
    ranked = sorted(groups.items(), key=lambda kv: (-max(f.score for f in kv[1]), kv[0]))
    plots = []
    for (entity, kpi), group in ranked[:MAX_PLOTS]:
        group.sort(key=lambda f: f.ts)
        windows = [w for w in maintenance if w.entity == entity]
        svg = _chart(incident, group, windows, present.unit_of(kpi, kpis), kpi)
        plots.append(Plot(entity, kpi, f"{entity} · {kpi}", svg))
    return plots


def _frame(incident: Incident, group: Sequence[Finding], unit: str) -> _Frame:
    end = incident.resolved_at or incident.updated_at
    t0 = min(incident.opened_at, group[0].ts)
    t1 = max(end, group[-1].ts)
    pad = max((t1 - t0) * 0.08, 300.0)
    floor, ceiling = present._bounds(unit)
    values = [f.observed for f in group]
    values += [v for f in group for v in (f.expected_low, f.expected_high) if math.isfinite(v)]
    lo, hi = max(min(values), floor), min(max(values), ceiling)
    if hi - lo < 1e-12:
        lo, hi = lo - max(abs(lo) * 0.1, 1e-6), hi + max(abs(hi) * 0.1, 1e-6)
    margin = (hi - lo) * 0.08
    return _Frame(t0 - pad, t1 + pad, max(lo - margin, floor), min(hi + margin, ceiling))


def _chart(
    incident: Incident,
    group: Sequence[Finding],
    windows: Sequence[Maintenance],
    unit: str,
    kpi: str,
) -> Markup:
    fr = _frame(incident, group, unit)
    floor, ceiling = present._bounds(unit)
    end = incident.resolved_at or incident.updated_at
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH:g} {HEIGHT:g}" '
        f'width="{WIDTH:g}" height="{HEIGHT:g}" role="img" class="evidence-plot">',
        f"<title>{escape(kpi)}: {len(group)} finding(s) with their expected band</title>",
        _rect(fr, incident.opened_at, end, "#f87171", "incident"),
    ]
    for w in windows:
        if w.end >= fr.t0 and w.start <= fr.t1:
            parts.append(
                _rect(fr, max(w.start, fr.t0), min(w.end, fr.t1), "#9ca3af", "maintenance")
            )
    band_top = [(fr.x(f.ts), fr.y(min(f.expected_high, ceiling))) for f in group]
    band_low = [(fr.x(f.ts), fr.y(max(f.expected_low, floor))) for f in reversed(group)]
    if len(group) == 1:  # a band needs width: a short bar around the one point
        (x, yt), (_, yl) = band_top[0], band_low[0]
        band_top, band_low = [(x - 4, yt), (x + 4, yt)], [(x + 4, yl), (x - 4, yl)]
    poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in [*band_top, *band_low])
    parts.append(
        f'<polygon points="{poly}" fill="#60a5fa" fill-opacity="0.35" stroke="#93c5fd">'
        + "<title>expected band</title></polygon>"
    )
    line = " ".join(f"{fr.x(f.ts):.1f},{fr.y(f.observed):.1f}" for f in group)
    parts.append(f'<polyline points="{line}" fill="none" stroke="#e5e7eb" stroke-width="1.2"/>')
    for f in group:
        colour = "#9ca3af" if f.evidence_only or f.held_by else "#dc2626"
        band = present.band(kpi, f.expected_low, f.expected_high)
        label = f"{_hhmm(f.ts)} UTC: {present.value(kpi, f.observed)} (expected {band})"
        parts.append(
            f'<circle cx="{fr.x(f.ts):.1f}" cy="{fr.y(f.observed):.1f}" r="3" fill="{colour}">'
            f"<title>{escape(label)}</title></circle>"
        )
    parts += _axes(fr, kpi)
    parts.append("</svg>")
    return Markup("".join(parts))


def _rect(fr: _Frame, start: float, end: float, fill: str, what: str) -> str:
    x0, x1 = fr.x(start), fr.x(max(end, start))
    return (
        f'<rect x="{x0:.1f}" y="{TOP:g}" width="{max(x1 - x0, 1.0):.1f}" '
        f'height="{HEIGHT - TOP - BOTTOM:g}" fill="{fill}" fill-opacity="0.22">'
        f"<title>{what}</title></rect>"
    )


def _axes(fr: _Frame, kpi: str) -> list[str]:
    base = HEIGHT - BOTTOM
    text = 'font-size="10" fill="#d1d5db" font-family="sans-serif"'
    return [
        f'<line x1="{LEFT:g}" y1="{TOP:g}" x2="{LEFT:g}" y2="{base:g}" stroke="#6b7280"/>',
        f'<line x1="{LEFT:g}" y1="{base:g}" x2="{WIDTH - RIGHT:g}" y2="{base:g}" '
        'stroke="#6b7280"/>',
        f'<text x="{LEFT - 4:g}" y="{TOP + 8:g}" text-anchor="end" {text}>'
        f"{escape(present.value(kpi, fr.y1))}</text>",
        f'<text x="{LEFT - 4:g}" y="{base:g}" text-anchor="end" {text}>'
        f"{escape(present.value(kpi, fr.y0))}</text>",
        f'<text x="{LEFT:g}" y="{HEIGHT - 6:g}" {text}>{_hhmm(fr.t0)} UTC</text>',
        f'<text x="{WIDTH - RIGHT:g}" y="{HEIGHT - 6:g}" text-anchor="end" {text}>'
        f"{_hhmm(fr.t1)} UTC</text>",
    ]


def _hhmm(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M")


def sparkline(findings: Sequence[Finding], width: float = 90.0, height: float = 18.0) -> Markup:
    """An incident's findings as severities over time, for its row in the list (empty markup
    without findings).

    >>> from noc_assistant.models import Finding
    >>> fs = [Finding(id=f"f{i}", detector="d", kpi="k", entity="e", ts=60.0 * i, score=s,
    ...               observed=1, expected_low=0, expected_high=2, direction="up")
    ...       for i, s in enumerate([1.0, 5.0, 2.0])]
    >>> s = sparkline(fs)
    >>> s.split('points="')[1].split('"')[0].count(","), "peak severity" in s
    (3, True)
    """
    points = sorted((f.ts, present.severity_index(f.score)) for f in findings)
    if not points:
        return Markup("")
    t0, t1 = points[0][0], points[-1][0]
    span = t1 - t0 or 1.0
    coords = " ".join(
        f"{1 + (t - t0) / span * (width - 2):.1f},{height - 1 - s / 100 * (height - 2):.1f}"
        for t, s in points
    )
    peak = max(s for _, s in points)
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
        f'viewBox="0 0 {width:g} {height:g}" role="img" class="spark">'
        f"<title>{len(points)} finding(s), peak severity {peak}</title>"
        f'<polyline points="{coords}" fill="none" stroke="#dc2626" stroke-width="1.2"/></svg>'
    )


class _Network(Protocol):
    def neighbours(self, entity: str) -> set[str]: ...

    def type_of(self, entity: str) -> str: ...


def topology_svg(entities: Sequence[str], root: str | None, network: _Network) -> Markup:
    """The incident's entities (red), the ranked root-cause entity (ringed) and their direct
    neighbours (grey) on a circle, with the links between them.

    >>> class Net:
    ...     def neighbours(self, e): return {"smf-1": {"upf-1"}, "upf-1": {"smf-1"}}.get(e, set())
    ...     def type_of(self, e): return e.split("-")[0]
    >>> svg = topology_svg(["smf-1"], "upf-1", Net())
    >>> svg.count("<circle") >= 2 and svg.count("<line") == 1
    True
    """
    involved = list(dict.fromkeys([*entities, *([root] if root else [])]))
    around = sorted({n for e in involved for n in network.neighbours(e)} - set(involved))
    nodes = [*involved, *around][:24]
    if len(nodes) < 2:
        return Markup("")
    size, r = 320.0, 120.0
    pos = {
        n: (
            size / 2 + r * math.cos(2 * math.pi * i / len(nodes)),
            size / 2 + r * math.sin(2 * math.pi * i / len(nodes)),
        )
        for i, n in enumerate(nodes)
    }
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {size:g} {size:g}" '
        f'width="{size:g}" height="{size:g}" role="img" class="topology">'
        "<title>the incident's entities and their neighbours</title>"
    ]
    seen: set[frozenset[str]] = set()
    for a in nodes:
        for b in network.neighbours(a):
            edge = frozenset((a, b))
            if b in pos and edge not in seen:
                seen.add(edge)
                (x1, y1), (x2, y2) = pos[a], pos[b]
                parts.append(
                    f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                    'stroke="#4b5563"/>'
                )
    text = 'font-size="10" fill="#d1d5db" font-family="sans-serif" text-anchor="middle"'
    for n, (x, y) in pos.items():
        fill = "#dc2626" if n in entities else "#6b7280"
        ring = ' stroke="#fbbf24" stroke-width="2.5"' if n == root else ""
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{fill}"{ring}>'
            f"<title>{escape(n)} ({escape(network.type_of(n))})</title></circle>"
            f'<text x="{x:.1f}" y="{y + 18:.1f}" {text}>{escape(n)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
