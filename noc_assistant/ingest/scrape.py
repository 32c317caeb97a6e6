"""Direct scrapes of Prometheus exposition endpoints (``/metrics``): the live source of the
embedded default (docs/ARCHITECTURE.md), as Prometheus itself would scrape the exporters.

:func:`parse_exposition` reads the text format (Prometheus 0.0.4 and OpenMetrics): ``# TYPE``
lines give each family's type, which maps to FORMATS §1's sample types (a counter's samples
are ``counter``, a histogram's ``_bucket``/``_sum``/``_count`` are ``histogram_bucket`` /
``histogram_sum`` / ``histogram_count``, a summary's ``_sum``/``_count`` likewise and its
quantiles gauges; ``_created`` samples are skipped). The scrape target names the entity: the
``instance`` label is set to it, and an ``instance`` the exporter wrote itself is kept as
``exported_instance`` (Prometheus' ``honor_labels: false``). A line that is not a sample is
quarantined with the target's URL and its line number; the rest of the scrape is read.

:class:`Scraper` scrapes a set of targets concurrently. A target that does not answer gives no
samples at all (no ``up = 0`` sample): silence is what the pipeline's liveness KPIs judge.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.ingest.window import LIVE_WINDOW, TimeWindow

__all__ = [
    "ScrapeResult",
    "Scraper",
    "Target",
    "parse_exposition",
    "parse_target",
    "sample_type",
]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+(-?\d+(?:\.\d+)?))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], value)


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError(f'labels {{{text}}} are not name="value" pairs')
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _value(text: str) -> float | None:
    try:
        number = float(text)  # NaN, +Inf, -Inf are spelled as float() reads them
    except ValueError:
        raise ValueError(f"value {text!r} is not a number") from None
    return None if math.isnan(number) else number


def sample_type(name: str, types: dict[str, str]) -> str | None:
    """FORMATS §1's type of a sample named ``name``, given the families' types (``# TYPE``
    lines, or Prometheus' metadata); None for samples to skip (``_created``).

    >>> types = {"reqs": "counter", "lat": "histogram", "rpc": "summary"}
    >>> [sample_type(n, types) for n in ("reqs_total", "lat_bucket", "rpc_sum", "rpc", "x")]
    ['counter', 'histogram_bucket', 'histogram_sum', 'gauge', 'gauge']
    """
    family = types.get(name)
    suffix = ""
    if family is None:
        for end in _SUFFIXES:
            if name.endswith(end) and name[: -len(end)] in types:
                family, suffix = types[name[: -len(end)]], end
                break
    if suffix == "_created":
        return None
    if family == "counter":
        return "counter"
    if family in ("histogram", "gaugehistogram"):
        return {"_bucket": "histogram_bucket", "_sum": "histogram_sum"}.get(
            suffix, "histogram_count"
        )
    if family == "summary" and suffix in ("_sum", "_count"):
        return "histogram_sum" if suffix == "_sum" else "histogram_count"
    return "gauge"  # gauge, untyped, unknown, info, stateset, a summary's quantiles


def parse_exposition(
    text: str,
    *,
    instance: str,
    ts: float,
    source: str,
    quarantine: Quarantine | None = None,
    window: TimeWindow | None = LIVE_WINDOW,
) -> Iterator[Point]:
    """The samples of one scrape as points of ``instance`` at ``ts`` (a sample's own time
    stamp, in milliseconds, wins, where it lies in ``window``); bad lines go to
    ``quarantine``, a sample stamped outside ``window`` too (an exporter's garbage clock).

    >>> text = '''# TYPE reqs counter
    ... reqs_total{nf="amf"} 1027
    ... reqs_created{nf="amf"} 1.7e9
    ... # TYPE lat histogram
    ... lat_bucket{le="0.1"} 3
    ... lat_sum 0.42
    ... up{instance="10.0.0.5:9100"} 1
    ... temp NaN
    ... '''
    >>> for p in parse_exposition(text, instance="amf-1", ts=60.0, source="t"):
    ...     print(p.metric, dict(p.labels), p.value, p.type)
    reqs_total {'instance': 'amf-1', 'nf': 'amf'} 1027.0 counter
    lat_bucket {'instance': 'amf-1', 'le': '0.1'} 3.0 histogram_bucket
    lat_sum {'instance': 'amf-1'} 0.42 histogram_sum
    up {'exported_instance': '10.0.0.5:9100', 'instance': 'amf-1'} 1.0 gauge
    temp {'instance': 'amf-1'} None gauge
    """
    types: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip().lower()
            continue
        body = line.split(" # ", 1)[0]  # an OpenMetrics exemplar follows " # "
        m = _SAMPLE.match(body)
        try:
            if m is None:
                raise ValueError("not a sample line (name{labels} value [timestamp])")
            name, label_text, value_text, stamp = m.groups()
            labels = _labels(label_text) if label_text else {}
            value = _value(value_text)
            at = float(stamp) / 1000.0 if stamp else ts
            if stamp and window is not None:
                window.check(at)
        except ValueError as exc:
            if quarantine is not None:
                quarantine.add(source, lineno, str(exc), raw)
            continue
        kind = sample_type(name, types)
        if kind is None:
            continue
        if "instance" in labels:
            labels["exported_instance"] = labels["instance"]
        labels["instance"] = instance
        yield Point(at, name, tuple(sorted(labels.items())), value, kind)


@dataclass(frozen=True)
class Target:
    """A scrape target: the entity it is and the URL of its exposition."""

    instance: str
    url: str


def parse_target(text: str) -> Target:
    """``INSTANCE=URL`` (``amf-1=http://10.0.0.5:9090/metrics``).

    >>> parse_target("amf-1=http://10.0.0.5:9090/metrics")
    Target(instance='amf-1', url='http://10.0.0.5:9090/metrics')
    """
    instance, sep, url = text.partition("=")
    if not sep or not instance or not url.startswith(("http://", "https://")):
        raise ValueError(f"target {text!r}: write INSTANCE=http://HOST:PORT/metrics")
    return Target(instance.strip(), url.strip())


@dataclass
class ScrapeResult:
    points: list[Point] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """instance → why its scrape failed (no samples from it this time)."""


class Scraper:
    """Scrapes ``targets`` concurrently (one thread per target, up to 16)."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        timeout_s: float = 10.0,
        quarantine: Quarantine | None = None,
    ) -> None:
        if len({t.instance for t in targets}) != len(targets):
            raise ValueError("two scrape targets name the same instance")
        self.targets = list(targets)
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self._client = httpx.Client(
            timeout=timeout_s,
            headers={"Accept": "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"},
        )
        self._pool = ThreadPoolExecutor(max_workers=min(16, max(1, len(self.targets))))

    def _one(self, target: Target, ts: float) -> tuple[Target, list[Point] | str]:
        try:
            resp = self._client.get(target.url)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            return target, f"{target.url}: {exc}"
        points = parse_exposition(
            resp.text,
            instance=target.instance,
            ts=ts,
            source=target.url,
            quarantine=self.quarantine,
        )
        return target, list(points)

    def scrape(self, ts: float | None = None) -> ScrapeResult:
        """One scrape of every target, stamped ``ts`` (default: now)."""
        at = time.time() if ts is None else ts
        result = ScrapeResult()
        for target, got in self._pool.map(lambda t: self._one(t, at), self.targets):
            if isinstance(got, str):
                result.failed[target.instance] = got
            else:
                result.points.extend(got)
        return result

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()
