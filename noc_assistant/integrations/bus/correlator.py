"""The network-wide correlator (``noc bus correlate``): the same durable, snapshotted
consumer as a worker, on the findings stream the workers of slices publish to. It merges
their ticks (the slowest worker's time is its clock, :mod:`noc_assistant.stream.fanin`) and
correlates, ranks and stores for the whole network, as one worker over all the telemetry
would have. A worker restarted from its snapshot sends again what followed it; the
correlator knows each worker's last sequence and takes nothing twice."""

from __future__ import annotations

import math
from collections.abc import Callable

from knowledge.pack import Pack
from knowledge.topology import Topology
from noc_assistant.errors import BadInputError, ConfigError
from noc_assistant.ingest import Quarantine
from noc_assistant.stream.fanin import FanIn, decode_batch
from noc_assistant.stream.pipeline import IncidentSink, Pipeline

from .config import CorrelatorConfig
from .worker import BusWorker

__all__ = ["CorrelatorWorker", "LagWatch", "correlator_pipeline"]

_DEFAULT_INTERVAL_S = 60.0
"""The scrape interval assumed until the workers' is known."""


def correlator_pipeline(
    pack: Pack,
    topology: Topology | None,
    quarantine: Quarantine,
    on_incident: IncidentSink | None,
) -> Callable[[], Pipeline]:
    """The correlator's ``make_pipeline``: a pipeline that merges workers' findings."""

    def make() -> Pipeline:
        return Pipeline(
            pack=pack,
            topology=topology,
            quarantine=quarantine,
            on_incident=on_incident,
            fan_in=FanIn(),
        )

    return make


class CorrelatorWorker(BusWorker):
    """The correlator over the workers' findings stream (module docstring): ``make_pipeline``
    builds a pipeline with a :class:`~noc_assistant.stream.fanin.FanIn`; a batch that is not
    one is quarantined with its stream sequence. The workers of a :class:`CorrelatorConfig`
    (``expect``, ``retire``) apply to a restored state too (:meth:`FanIn.set_workers`): the
    workers of this run are the command line's, not the snapshot's."""

    def _resumed(self, pipe: Pipeline) -> None:
        if pipe.fan_in is None:
            raise ConfigError("the correlator's pipeline reads telemetry, not findings")
        cfg = self.config
        if isinstance(cfg, CorrelatorConfig):
            pipe.fan_in.set_workers(cfg.expect, cfg.retire)
        else:
            pipe.fan_in.set_workers(frozenset())
        pipe.release()  # what a retired worker held back

    def _feed(self, pipe: Pipeline, subject: str, seq: int, data: bytes) -> int:
        source = f"nats:{self.config.stream}#{seq} ({subject})"
        try:
            batch = decode_batch(data, source)
        except BadInputError as exc:
            self.quarantine.add(source, 1, str(exc), data.decode("utf-8", "replace"))
            return 0
        return pipe.take(batch)


class LagWatch:
    """Which workers the correlator waits for, said once when a worker falls ``intervals``
    scrape intervals behind the most advanced one (or is not heard from), and once when it
    catches up. Messages only: the caller shows them."""

    def __init__(self, intervals: float) -> None:
        self.intervals = intervals
        self._said: set[str] = set()

    def check(self, pipe: Pipeline | None) -> tuple[list[str], list[str]]:
        """(workers newly waited for, workers caught up), as lines for an operator.

        >>> from types import SimpleNamespace  # a pipeline's fan-in and scrape interval
        >>> watch = LagWatch(10)
        >>> fan_in = FanIn(expect=frozenset({"a", "b"}), marks={"a": 900.0})
        >>> pipe = SimpleNamespace(fan_in=fan_in, interval_s=None)
        >>> watch.check(pipe)
        (['correlator waits for worker b: not heard from yet'], [])
        >>> watch.check(pipe)
        ([], [])
        >>> fan_in.marks["b"] = 900.0
        >>> watch.check(pipe)
        ([], ['worker b caught up'])
        """
        if pipe is None or pipe.fan_in is None:
            return [], []
        behind = pipe.fan_in.lagging(self.intervals * (pipe.interval_s or _DEFAULT_INTERVAL_S))
        waits = [
            f"correlator waits for worker {w}: "
            + (
                "not heard from yet"
                if math.isinf(lag)
                else f"{lag:,.0f} s behind the most advanced worker"
            )
            for w, lag in behind.items()
            if w not in self._said
        ]
        caught_up = sorted(w for w in self._said if w not in behind)
        self._said = set(behind)
        return waits, [f"worker {w} caught up" for w in caught_up]
