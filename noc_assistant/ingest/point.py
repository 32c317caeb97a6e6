"""The hot-path sample type and metric-name normalisation."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

__all__ = ["METRIC_TYPES", "Point", "canonical_metric"]

METRIC_TYPES = frozenset(
    {"counter", "gauge", "histogram_bucket", "histogram_sum", "histogram_count"}
)


class Point(NamedTuple):
    """One sample (docs/FORMATS.md §1) in the form the pipeline moves around.

    ``value`` None is a gap (a missing sample), never zero. ``labels`` is a tuple of sorted
    pairs so that a point is hashable and its series identity is ``(metric, labels)``.
    """

    ts: float
    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float | None
    type: str = "gauge"

    @property
    def instance(self) -> str:
        for name, value in self.labels:
            if name == "instance":
                return value
        return ""


@lru_cache(maxsize=65536)
def canonical_metric(name: str, type_: str = "gauge") -> str:
    """Name under which a series is looked up, whatever exporter spelling it arrived with.

    Colons become underscores (OpenMetrics escaping), a counter's ``_total`` suffix is
    optional on the wire (Open5GS omits it, prometheus_client adds it), and histogram
    parts are keyed by their base name.

    >>> canonical_metric("vllm:num_preemptions_total", "counter")
    'vllm_num_preemptions'
    >>> canonical_metric("fivegs_amffunction_rm_reginitreq", "counter")
    'fivegs_amffunction_rm_reginitreq'
    >>> canonical_metric("vllm:time_to_first_token_seconds_sum", "histogram_sum")
    'vllm_time_to_first_token_seconds'
    """
    name = name.replace(":", "_")
    for part, suffix in (
        ("histogram_sum", "_sum"),
        ("histogram_count", "_count"),
        ("histogram_bucket", "_bucket"),
    ):
        if type_ == part and name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith("_total"):
        name = name[: -len("_total")]
    return name
