"""A Prometheus server as a telemetry source (its HTTP API, ``/api/v1``): the metrics source at
scale (docs/ARCHITECTURE.md), for a network whose exporters Prometheus already scrapes.

:class:`PrometheusSource` reads the raw samples Prometheus stored, not a resampled grid: an
instant query of a range selector (``{...}[1h]``) returns each series' samples with their own
time stamps, so a counter's resets and a missed scrape look exactly as they did on the wire. A
long span is read an hour at a time. Types come from the metadata API (``counter``,
``histogram`` …, mapped as a scrape's ``# TYPE`` lines are:
:func:`noc_assistant.ingest.scrape.sample_type`). The ``instance`` label (Prometheus' target,
or what the operator relabelled it to) names the entity, as in FORMATS §1.

``noc prom export`` writes such a span as a FORMATS §1 replay file, which ``noc eval run``
scores against a labels file: the false-positive rate of the detectors on the operator's own
history.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from noc_assistant.errors import ConfigError
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.scrape import sample_type

__all__ = ["PrometheusError", "PrometheusSource"]


class PrometheusError(ConfigError):
    """The Prometheus server is unreachable or refused a query (a setting to fix: exit 2)."""


class PrometheusSource:
    """Raw samples of the series matching ``match`` (PromQL selectors) from ``url``."""

    def __init__(
        self,
        url: str,
        *,
        match: Sequence[str] = ('{__name__=~".+"}',),
        chunk_s: float = 3600.0,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.match = list(match)
        self.chunk_s = chunk_s
        self._client = httpx.Client(timeout=timeout_s, transport=transport)
        self._types: dict[str, str] | None = None

    def _get(self, path: str, params: dict[str, str]) -> Any:
        try:
            resp = self._client.get(f"{self.url}/api/v1/{path}", params=params)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{self.url}: {exc}") from None
        try:
            body = resp.json()
        except ValueError:
            raise PrometheusError(f"{self.url}/api/v1/{path}: HTTP {resp.status_code}") from None
        if body.get("status") != "success":
            raise PrometheusError(
                f"{self.url}/api/v1/{path} {params}: {body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def types(self) -> dict[str, str]:
        """Metric family → type, from the metadata of the targets Prometheus scrapes."""
        if self._types is None:
            meta = self._get("metadata", {})
            self._types = {name: entries[0]["type"] for name, entries in meta.items() if entries}
        return self._types

    def fetch(self, start: float, end: float) -> Iterator[Point]:
        """The samples in ``(start, end]``, in time order within each chunk."""
        if not end > start:
            return
        types = self.types()
        lo = start
        while lo < end:
            hi = min(end, lo + self.chunk_s)
            points: list[Point] = []
            for selector in self.match:
                rng = f"{max(1, math.ceil(hi - lo))}s"
                data = self._get("query", {"query": f"{selector}[{rng}]", "time": f"{hi:.3f}"})
                if data.get("resultType") != "matrix":
                    raise PrometheusError(f"{selector}: not a range selector's answer")
                for series in data["result"]:
                    labels = dict(series["metric"])
                    name = labels.pop("__name__", "")
                    kind = sample_type(name, types)
                    if kind is None or not name:
                        continue
                    key = tuple(sorted(labels.items()))
                    for ts, raw in series.get("values", []):
                        t = float(ts)
                        if lo < t <= hi:
                            value = float(raw)
                            points.append(
                                Point(t, name, key, None if math.isnan(value) else value, kind)
                            )
            points.sort(key=lambda p: p.ts)
            yield from points
            lo = hi

    def close(self) -> None:
        self._client.close()
