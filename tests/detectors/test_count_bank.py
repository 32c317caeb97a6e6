"""The count gates as arrays (:mod:`detectors.count_bank`) against :class:`CountGate` itself:
the same shown transitions and the same state, bit for bit, step after step."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from detectors.count_bank import FIELDS, CountGates
from detectors.counts import CountGate

KINDS = [None, "open", "update", "close"]


def _state(gate: CountGate) -> list[str]:
    """A gate's state, each number exactly (``repr``: NaN equals NaN, -0.0 is not 0.0)."""
    return [repr(getattr(gate, name)) for name in FIELDS]


def _sequence(rng: random.Random, steps: int) -> list[tuple[float, float, float, int, bool]]:
    """A count series' ticks: mostly quiet, with bursts, jittered and repeated times, odd
    values (fractions, a negative, NaN), and transitions and firing as a monitor gives."""
    out = []
    t, firing = 0.0, False
    window = rng.choice([60.0, 240.0, 0.0])
    busy = rng.choice([0.85, 1.0])  # a quiet counter (sparse) or a busy one
    for _ in range(steps):
        t += rng.choice([60.0, 60.0, 60.0, 15.0, 0.0, 61.5])
        r = rng.random() * busy
        if r < 0.8:
            count = 0.0
        elif r < 0.95:
            count = float(rng.randint(1, 3))
        elif r < 0.99:
            count = float(rng.randint(5, 400))
        else:
            count = rng.choice([0.5, 2.37, -0.001, -3.0])  # finite: a usable value
        kind = rng.choices(range(4), weights=[80, 8, 6, 6])[0]
        if kind == 1:
            firing = True
        elif kind == 3:
            firing = False
        elif rng.random() < 0.02:
            firing = not firing
        out.append((t, count, window, kind, firing))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_arrays_step_as_the_gates_do(seed: int) -> None:
    rng = random.Random(seed)
    series = {f"s{i}": _sequence(rng, 1500) for i in range(10)}
    gates = CountGates(target_rate=0.005)
    plain = {key: CountGate(0.005) for key in series}
    for step in range(1500):
        keys = [k for k in series if rng.random() < 0.9]  # not every series every tick
        rows = gates.rows(keys)
        ticks = [series[k][step] for k in keys]
        shown = gates.step(
            rows,
            np.array([x[0] for x in ticks]),
            np.array([x[1] for x in ticks]),
            np.array([x[2] for x in ticks]),
            np.array([x[3] for x in ticks], np.int8),
            np.array([x[4] for x in ticks], np.bool_),
        )
        for key, (t, count, window, kind, firing), code in zip(keys, ticks, shown, strict=True):
            want = plain[key].step(t, count, window, KINDS[kind], firing)
            assert KINDS[int(code)] == want, (seed, step, key)
            assert _state(gates[key]) == _state(plain[key]), (seed, step, key)
    assert any(g.sparse_ for g in plain.values()) and any(g.clip_t_ for g in plain.values())


def test_gates_of_a_snapshot_become_rows() -> None:
    """A monitor bank of a snapshot kept a gate per key: they become rows, the same state."""
    rng = random.Random(3)
    old = {}
    for key in ("a", "b"):
        gate = CountGate(0.01)
        for t, count, window, kind, firing in _sequence(rng, 300):
            gate.step(t, count, window, KINDS[kind], firing)
        old[key] = gate
    gates = pickle.loads(pickle.dumps(CountGates.of(old, 0.01)))
    assert sorted(gates) == ["a", "b"]
    assert all(_state(gates[k]) == _state(old[k]) for k in old)
    assert gates.gated("a") == old["a"].gated_ and not gates.gated("nope")
