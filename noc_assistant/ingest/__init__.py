"""Ingest: telemetry sources → ordered, de-duplicated points → reset-aware series store.

Sources yield :class:`Point`; :class:`ReorderBuffer` puts them in time order within an allowed
lateness, and :class:`SeriesStore` keeps the recent history each KPI formula needs.
"""

from noc_assistant.ingest.point import Point, canonical_metric
from noc_assistant.ingest.quarantine import Quarantine, QuarantineRecord
from noc_assistant.ingest.reader import read_replay
from noc_assistant.ingest.reorder import ReorderBuffer
from noc_assistant.ingest.series import SeriesStore
from noc_assistant.ingest.window import LIVE_WINDOW, REPLAY_WINDOW, TimeWindow

__all__ = [
    "LIVE_WINDOW",
    "REPLAY_WINDOW",
    "Point",
    "Quarantine",
    "QuarantineRecord",
    "ReorderBuffer",
    "SeriesStore",
    "TimeWindow",
    "canonical_metric",
    "read_replay",
]
