"""One network-wide correlation over detector workers that each watch a slice of the network.

A deployment that outgrows one process runs detector workers on slices of the telemetry
(``noc bus worker --findings``, one subject filter each). Correlation and root-cause ranking
need the whole network: a UPF's GTP-U drop and the SMF's PFCP failures are one incident
whatever worker watched which. So a worker in that mode does not correlate for the NOC; it
sends what its detectors decided at each evaluation tick, and one correlator
(``noc bus correlate``) merges the workers' ticks into the single pipeline's order:

- :class:`TickRecorder` is a pipeline's :class:`~noc_assistant.stream.pipeline.Outbox`: the findings
  (with whether the detector saw a further reading, before any correlator judged it) and
  clears of each tick, then the tick itself.
- :func:`encode_batch` / :func:`decode_batch`: the message a worker publishes after each
  telemetry message that ended ticks: its name, the telemetry message's stream sequence
  (``part`` 1 for what the end of the feed released), and the ticks.
- :class:`FanIn`: the correlator's merge state. Each worker's ticks arrive in its order; a tick
  is released once every worker (those named in ``expect``, and every one heard from) has
  reported a tick at least as late (a watermark, the slowest worker's), and then the ticks go
  in time order, each tick's events in the order a single pipeline takes them (phase, then
  entity name), so the network-wide correlator sees what a single pipeline over all the
  telemetry would have seen (tested).
  A batch already taken (a restarted worker sends again what it sent after its last snapshot)
  is recognised by its (worker, sequence, part) and skipped.

No NATS here (:mod:`noc_assistant.integrations.bus` carries the batches); this module is the
pure merge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from noc_assistant.errors import BadInputError
from noc_assistant.models import Finding

__all__ = [
    "Batch",
    "Clear",
    "FanIn",
    "Seen",
    "Tick",
    "TickRecorder",
    "decode_batch",
    "encode_batch",
]

FORMAT = 1
"""Version of the batch message: a correlator refuses a batch of another version."""


@dataclass(frozen=True)
class Seen:
    """A finding as the worker's detector emitted it; ``reading`` says the detector reported
    a further reading of an alarm (the correlator decides whether it is one of an open
    incident, as :attr:`Finding.update` says)."""

    finding: Finding
    reading: bool
    phase: int = 1

    @property
    def entity(self) -> str:
        return self.finding.entity


@dataclass(frozen=True)
class Clear:
    """A series' alarm closed."""

    series: str
    entity: str
    ts: float
    phase: int = 1


Event = Seen | Clear


@dataclass(frozen=True)
class Tick:
    """One evaluation of a worker's pipeline: its time, the scrape interval then, and what
    its detectors decided, in their order."""

    at: float
    step: float
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Batch:
    worker: str
    seq: int
    part: int
    ticks: tuple[Tick, ...]
    final: bool = False
    """The worker's feed ended: it no longer holds the others back (until it sends again)."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.seq, self.part)


class TickRecorder:
    """A pipeline's outbox that keeps each tick's events until :meth:`take`."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._ticks: list[Tick] = []

    def finding(self, finding: Finding, reading: bool, phase: int) -> None:
        self._events.append(Seen(finding, reading, phase))

    def clear(self, series: str, entity: str, ts: float, phase: int) -> None:
        self._events.append(Clear(series, entity, ts, phase))

    def tick(self, at: float, step: float) -> None:
        self._ticks.append(Tick(at, step, tuple(self._events)))
        self._events = []

    def take(self) -> tuple[Tick, ...]:
        """The ticks ended since the last call (events of a tick not ended stay)."""
        out, self._ticks = tuple(self._ticks), []
        return out


def _event_json(ev: Event) -> dict[str, Any]:
    if isinstance(ev, Seen):
        return {
            "finding": ev.finding.model_dump(mode="json"),
            "reading": ev.reading,
            "phase": ev.phase,
        }
    return {"clear": [ev.series, ev.entity, ev.ts], "phase": ev.phase}


def encode_batch(batch: Batch) -> bytes:
    """The message body of a batch (JSON).

    >>> b = Batch("w1", 7, 0, (Tick(300.0, 300.0, (Clear("kpi", "upf-1", 290.0),)),))
    >>> decode_batch(encode_batch(b), "test") == b
    True
    """
    return orjson.dumps(
        {
            "format": FORMAT,
            "worker": batch.worker,
            "seq": batch.seq,
            "part": batch.part,
            "final": batch.final,
            "ticks": [
                {"at": t.at, "step": t.step, "events": [_event_json(e) for e in t.events]}
                for t in batch.ticks
            ],
        }
    )


def _event(raw: Any, where: str) -> Event:
    if isinstance(raw, dict) and "finding" in raw:
        finding = Finding.model_validate(raw["finding"])
        return Seen(finding, bool(raw.get("reading", False)), int(raw.get("phase", 1)))
    if isinstance(raw, dict) and "clear" in raw:
        series, entity, ts = raw["clear"]
        return Clear(str(series), str(entity), float(ts), int(raw.get("phase", 1)))
    raise ValueError(f"{where}: neither a finding nor a clear")


def decode_batch(data: bytes, source: str) -> Batch:
    """A batch message; :class:`BadInputError` naming ``source`` and the field otherwise.

    >>> decode_batch(b'{"format": 1, "worker": "w1"}', "nats:F#3")
    Traceback (most recent call last):
    ...
    noc_assistant.errors.BadInputError: nats:F#3: not a findings batch: missing field 'ticks'
    """
    try:
        raw = orjson.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, this correlator reads {FORMAT}")
        ticks = tuple(
            Tick(
                float(t["at"]),
                float(t["step"]),
                tuple(_event(e, f"ticks[{i}].events[{j}]") for j, e in enumerate(t["events"])),
            )
            for i, t in enumerate(raw["ticks"])
        )
        for t in ticks:
            if not (math.isfinite(t.at) and math.isfinite(t.step) and t.step > 0):
                raise ValueError(f"tick at {t.at} with step {t.step}")
        return Batch(
            worker=str(raw["worker"]),
            seq=int(raw["seq"]),
            part=int(raw.get("part", 0)),
            ticks=ticks,
            final=bool(raw.get("final", False)),
        )
    except (ValueError, KeyError, TypeError, IndexError, ValidationError) as exc:
        if isinstance(exc, KeyError):
            text = f"missing field {exc}"
        else:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInputError(f"not a findings batch: {text}", source=source) from None


@dataclass
class FanIn:
    """The correlator's merge of the workers' ticks (see the module docstring)."""

    expect: frozenset[str] = frozenset()
    """Workers that must have reported before any tick is released (a worker not named here
    counts from its first batch: one that starts late may find earlier ticks released)."""
    done: dict[str, tuple[int, int]] = field(default_factory=dict)
    """worker → the (sequence, part) of its last batch taken"""
    marks: dict[str, float] = field(default_factory=dict)
    """worker → its latest tick (math.inf once its feed ended)"""
    pending: dict[float, dict[str, list[Event]]] = field(default_factory=dict)
    steps: dict[float, float] = field(default_factory=dict)
    released: float = -math.inf
    late: int = 0
    """Ticks that arrived after the merge had passed their time (a worker that joined late):
    their events are taken at the next release, not dropped."""

    def offer(self, batch: Batch) -> bool:
        """Take a batch; False (and nothing changes) if this worker's batch was taken before."""
        last = self.done.get(batch.worker)
        if last is not None and batch.key <= last:
            return False
        self.done[batch.worker] = batch.key
        if self.marks.get(batch.worker) == math.inf and not batch.final:
            # its feed had ended (a replay's --finish) and it runs again: it counts again
            self.marks[batch.worker] = self.released
        for tick in batch.ticks:
            at = tick.at
            if at <= self.released:
                self.late += 1
                at = math.nextafter(self.released, math.inf)
            self.pending.setdefault(at, {}).setdefault(batch.worker, []).extend(tick.events)
            self.steps[at] = tick.step
            self.marks[batch.worker] = max(self.marks.get(batch.worker, -math.inf), at)
        if batch.final:
            self.marks[batch.worker] = math.inf
        return True

    def set_workers(self, expect: frozenset[str], retire: frozenset[str] = frozenset()) -> None:
        """Wait for ``expect`` from now on, and no longer for ``retire`` (workers scaled away:
        a worker that is gone for good would hold the clock back forever). A retired worker
        that sends again counts again.

        >>> fan = FanIn(expect=frozenset({"a", "b"}), marks={"a": 900.0, "b": 60.0})
        >>> fan.set_workers(frozenset({"a"}), retire=frozenset({"b"}))
        >>> fan.watermark()
        900.0
        """
        self.expect = expect - retire
        for w in retire:
            self.marks.pop(w, None)

    def watermark(self) -> float:
        """The time up to which every worker has reported."""
        workers = set(self.marks) | set(self.expect)
        if not workers:
            return -math.inf
        return min(self.marks.get(w, -math.inf) for w in workers)

    def lagging(self, by_s: float) -> dict[str, float]:
        """The workers the merge waits for, more than ``by_s`` of data time behind the most
        advanced one (an expected worker not heard from yet: ``inf``); a worker that died
        holds the network's correlation back, and the operator has to know.

        >>> fan = FanIn(expect=frozenset({"a", "b", "c"}), marks={"a": 900.0, "b": 60.0})
        >>> fan.lagging(300.0)
        {'b': 840.0, 'c': inf}
        """
        finite = [m for m in self.marks.values() if math.isfinite(m)]
        if not finite:
            return {}
        front = max(finite)
        behind = {
            w: front - self.marks.get(w, -math.inf) for w in sorted(set(self.marks) | self.expect)
        }
        return {w: lag for w, lag in behind.items() if lag > by_s}

    def ready(self, *, everything: bool = False) -> list[Tick]:
        """The ticks every worker has passed (all of them, ``everything``), in time order,
        each with its events in a single pipeline's order (phase, then entity name; an
        entity's events come from one worker, in its order); they leave the state."""
        upto = math.inf if everything else self.watermark()
        times = sorted(t for t in self.pending if t <= upto)
        out = []
        for at in times:
            by_worker = self.pending.pop(at)
            merged = [e for w in sorted(by_worker) for e in by_worker[w]]
            events = tuple(sorted(merged, key=lambda e: (e.phase, e.entity)))
            out.append(Tick(at, self.steps.pop(at), events))
        if times:
            self.released = max(self.released, times[-1])
        return out
