"""The compiled KPI programs (``noc_assistant/stream/kpi_program.py``) give what the formulas
give through ``EntityView``, bit for bit, on series with resets, gaps, late and silent series,
NaN samples and histograms; the rings grow, and a snapshot from before them restores."""

from __future__ import annotations

import math
import pickle
import random
from collections import deque

import numpy as np
import pytest

from knowledge.formula import parse_formula
from noc_assistant.ingest.point import Point
from noc_assistant.ingest.rings import Rings
from noc_assistant.ingest.series import EntityView, SeriesState, SeriesStore
from noc_assistant.stream.kpi_program import RINGS_DIGEST, compile_rows, rings_digest

FORMULAS = [
    'increase("ok") / increase("req")',
    '1 - increase("ok", cause="a|b") / increase("req")',
    'rate("req") + rate("ok")',
    '-increase("req") * 2',
    'first(gauge("nope"), gauge_mean("temp"), 3)',
    'min(gauge_max("temp"), gauge_min("temp"), gauge("nope"))',
    'max(increase("nope"), gauge("temp") / 0, hist_mean("lat"))',
    'present("temp")',
    'hist_mean("lat") / (gauge("temp") - gauge("temp"))',
    'gauge("temp") / increase("req")',
    'first(increase("req", cause="c"), increase("req", cause="a"))',
]


def _store(seed: int) -> SeriesStore:
    """Series of one entity over 40 min at 15 s, shuffled within a scrape: counters that
    reset, skip scrapes, go silent or send NaN, gauges and a histogram's parts."""
    rng = random.Random(seed)
    store = SeriesStore(horizon_s=600.0)
    inst = ("instance", "amf-1")
    counts: dict[str, float] = {}
    for step in range(160):
        ts = 15.0 * step
        points = []
        for name, labels, kind in (
            ("req_total", (("cause", "a"), inst), "counter"),
            ("req_total", (("cause", "b"), inst), "counter"),
            ("req_total", (("cause", "c"), inst), "counter"),
            ("ok_total", (("cause", "a"), inst), "counter"),
            ("ok_total", (("cause", "b"), inst), "counter"),
            ("lat", (inst,), "histogram_sum"),
            ("lat", (inst,), "histogram_count"),
            ("temp", (inst, ("gpu", "0")), "gauge"),
            ("temp", (inst, ("gpu", "1")), "gauge"),
        ):
            key = name + str(labels)
            roll = rng.random()
            value: float | None
            if roll < 0.08:
                continue  # a missed scrape
            if roll < 0.12:
                value = None  # a gap
            elif kind == "gauge":
                value = math.nan if roll < 0.13 else rng.uniform(-5.0, 80.0)
            else:
                last = counts.get(key, 0.0)
                value = counts[key] = 0.0 if roll < 0.16 else last + rng.randint(0, 50)
            jitter = rng.choice([0.0, 0.0, 3.0])
            if "cause" in dict(labels) and dict(labels)["cause"] == "c" and step > 100:
                continue  # silent for good
            points.append(Point(ts + jitter, name, labels, value, kind))
        rng.shuffle(points)
        for p in points:
            store.add(p)
    return store


@pytest.mark.parametrize("seed", range(6))
def test_programs_equal_the_formulas_through_the_view(seed: int) -> None:
    store = _store(seed)
    rng = random.Random(100 + seed)
    formulas = [parse_formula(f) for f in FORMULAS]
    groups: list[dict[str, str]] = [{}, {"cause": "a"}]
    views = [EntityView(store, "amf-1", 0.0, 0.0, g) for f in formulas for g in groups]
    pairs = [(f, formulas[(i + 1) % len(formulas)]) for i, f in enumerate(formulas)]
    program = compile_rows(views, [p for p in pairs for _ in groups])
    compared = 0
    for _ in range(150):
        # mostly at a scrape (where the pipeline evaluates), sometimes between
        at = rng.choice([15.0 * rng.randint(0, 162), 3.0 + 15.0 * rng.randint(0, 162)])
        at = at if rng.random() < 0.8 else rng.uniform(0.0, 2450.0)
        since = at - rng.choice([15.0, 30.0, 0.0, 600.0])
        grace = rng.choice([0.0, 22.5, 45.0])
        windows = np.array([rng.choice([15.0, 60.0, 300.0, 900.0])] * len(views) * 2)
        values, has = program.run(store.rings, windows, at, since, grace)
        for r in range(len(views) * 2):
            value, support = pairs[(r // 2) // len(groups)]
            formula = value if r % 2 == 0 else support
            view = EntityView(
                store, "amf-1", at, float(windows[r]), views[r // 2].extra, grace, since
            )
            want = formula.evaluate(view)
            got = values[r] if has[r] else None
            assert got == want or (got is not None and want is not None and got == want), (
                formula.text,
                at,
                got,
                want,
            )
            compared += want is not None
    assert compared > 1000  # most rows have a value: the comparison is not of gaps only


@pytest.mark.parametrize("seed", range(3))
def test_joined_programs_give_each_part_its_own_values(seed: int) -> None:
    """A tick's entities run as one program (``Program.concat``), each part at its own time,
    last evaluation and grace: the values of each part run alone, bit for bit."""
    store = _store(seed)
    rng = random.Random(200 + seed)
    formulas = [parse_formula(f) for f in FORMULAS]
    parts = []
    for k in range(3):  # parts of different lengths, constants and leaves
        chosen = rng.sample(formulas, 3 + 2 * k)
        groups: list[dict[str, str]] = [{}, {"cause": "a"}][: 1 + k % 2]
        views = [EntityView(store, "amf-1", 0.0, 0.0, g) for _ in chosen for g in groups]
        pairs = [(f, None if i % 2 else chosen[0]) for i, f in enumerate(chosen)]
        parts.append(compile_rows(views, [p for p in pairs for _ in groups]))
    joined = type(parts[0]).concat(parts)
    sizes = [len(p.row_ptr) - 1 for p in parts]
    assert len(joined.row_ptr) - 1 == sum(sizes)
    compared = 0
    for _ in range(60):
        at = [15.0 * rng.randint(10, 162) for _ in parts]
        since = [t - rng.choice([15.0, 600.0]) for t in at]
        grace = [rng.choice([0.0, 22.5]) for _ in parts]
        windows = [np.array([rng.choice([60.0, 300.0])] * n) for n in sizes]
        values, has = joined.run(
            store.rings,
            np.concatenate(windows),
            np.repeat(at, sizes),
            np.repeat(since, sizes),
            np.repeat(grace, sizes),
        )
        start = 0
        for k, part in enumerate(parts):
            alone, alone_has = part.run(store.rings, windows[k], at[k], since[k], grace[k])
            end = start + sizes[k]
            assert has[start:end].tolist() == alone_has.tolist()
            assert values[start:end][alone_has].tolist() == alone[alone_has].tolist()
            compared += int(alone_has.sum())
            start = end
    assert compared > 300


def test_a_row_without_a_formula_has_no_value() -> None:
    store = _store(0)
    view = EntityView(store, "amf-1", 0.0, 0.0, {})
    program = compile_rows([view], [(parse_formula('increase("req")'), None)])
    values, has = program.run(store.rings, np.array([300.0, 300.0]), 2000.0, 1985.0, 22.5)
    assert has.tolist() == [True, False]
    assert values[0] == parse_formula('increase("req")').evaluate(
        EntityView(store, "amf-1", 2000.0, 300.0, {}, 22.5, 1985.0)
    )


def test_the_rings_grow_and_keep_order() -> None:
    rings = Rings(horizon_s=10_000.0)
    a, b = rings.new_series(), rings.new_series()
    for t in range(100):
        rings.note(a, float(t), float(t * t))
        if t % 10 == 0:
            rings.note(b, float(t), float(t))
    rings.flush()
    assert rings.capacity == 128
    assert rings.increase(a, 0.0, 99.0) == 99.0 * 99.0
    assert rings.increase(a, 97.0, 99.0) == 99.0 * 99.0 - 97.0 * 97.0
    assert rings.increase(b, 5.0, 95.0) == 85.0  # half of the 0 -> 10 step, and 80 more


def test_a_snapshot_from_before_the_rings_restores() -> None:
    """A store pickled when each series held a deque of increments: its series' numbers move
    into the rings, and it reads and goes on like a store that had them all along."""
    fresh = _store(3)
    old = SeriesStore(horizon_s=600.0)
    state = {k: v for k, v in vars(fresh).items() if k not in ("rings", "_last")}
    series = {}
    for key, st in fresh._series.items():
        legacy = SeriesState(st.labels, st.entity)
        del legacy.sid
        r = fresh.rings
        r.flush()
        i = st.sid
        cap = r.capacity
        order = [(int(r.head[i]) + k) % cap for k in range(int(r.size[i]))]
        vars(legacy).update(
            last_ts=float(r.last_ts[i]),
            last_value=float(r.last_value[i]) if r.has_value[i] else None,
            prev_counter=float(r.last_value[i]) if r.has_value[i] else None,
            increments=deque(
                (
                    float(r.r_prev[i, j]),
                    float(r.r_ts[i, j]),
                    float(r.r_inc[i, j]),
                    bool(r.r_reset[i, j]),
                )
                for j in order
            ),
            resets=int(r.resets[i]),
        )
        series[key] = legacy
    state["_series"] = series
    legacy_of = {id(fresh._series[k]): v for k, v in series.items()}
    state["_by_entity"] = {
        e: {c: [legacy_of[id(st)] for st in sts] for c, sts in by.items()}
        for e, by in fresh._by_entity.items()
    }
    state["_matching"] = {}
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    more = Point(2400.0, "req_total", (("cause", "a"), ("instance", "amf-1")), 1e6, "counter")
    for store in (fresh, old):
        store.add(more)
    f = parse_formula('increase("req") + gauge("temp")')
    for at in (2000.0, 2390.0, 2400.0):
        assert f.evaluate(old.view("amf-1", at, 300.0)) == f.evaluate(
            fresh.view("amf-1", at, 300.0)
        )


def test_the_kernels_digest_of_the_rings_is_current() -> None:
    """numba caches the KPI programs' kernels keyed on their own file, and they compile in
    the rings' functions: update ``RINGS_DIGEST`` after a change to the rings."""
    assert rings_digest() == RINGS_DIGEST
