"""The garbage collector's setting for a process that runs the pipeline.

A pipeline process keeps a large heap that lives as long as it does (each series' labels and
state, the pack, the detectors) and makes short-lived objects for every sample: a point, a
tuple in the reorder buffer, an observation. CPython collects its oldest generation, walking
the whole heap, after every ten collections of the middle one, as long as a quarter of the
heap is new since the last time. Points that wait between arrival and release (a scrape's or
a file chunk's batch, the reorder buffer's lateness) live through the young collections and
count as new, so those full collections keep coming and each walks every series' state.
Measured with ``bench/bench_scale.py --sites 8 --days 0.1`` (19,056 series): 73 full
collections, 17.2 s, about 40 % of the feed's CPU.

:func:`tune_collector` waits for 1,000 middle collections instead of 10 before a full one.
The young generations are collected as before, so short-lived cycles still go at once; a
cycle that reached the old generation waits longer. The same run: 2 full collections, 0.5 s,
and the same peak memory (783 and 785 MB).

A process sets this once, at its entry point (the ``noc`` command, a benchmark standing for
one); the library never changes a process-wide setting on its own.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_COLLECTION_EVERY", "tune_collector"]

#: middle-generation collections between two full ones (CPython's default is 10)
FULL_COLLECTION_EVERY = 1000


def tune_collector() -> tuple[int, ...]:
    """Set the collector for a pipeline process (module docstring); the thresholds before.

    >>> before = tune_collector()
    >>> gc.get_threshold()[2] == FULL_COLLECTION_EVERY
    True
    >>> gc.set_threshold(*before)
    """
    before = gc.get_threshold()
    young, middle = before[0], before[1]
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    return before
