"""The KPI history's arrays keep what a deque of (time, value) per series kept."""

from __future__ import annotations

import pickle
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noc_assistant.stream.history import KpiHistory

KEYS = [("amf-registration-success", "amf-1"), ("amf-gnb-associations", "amf-1"), ("x", "b")]


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 6),
    steps=st.lists(
        st.lists(st.tuples(st.sampled_from(range(3)), st.floats(allow_nan=True)), max_size=3),
        max_size=25,
    ),
)
def test_the_arrays_read_as_a_deque_per_series(
    length: int, steps: list[list[tuple[int, float]]]
) -> None:
    """Evaluations of any rows, any values (NaN included), past the length: each series
    reads what a deque of ``length`` held; a series with no value is no key."""
    history = KpiHistory(length)
    model: dict[tuple[str, str], deque[tuple[float, float]]] = {}
    rows = [history.row(k) for k in KEYS]
    for t, step in enumerate(steps):
        chosen = dict(step)  # one value per row and evaluation
        history.append(
            np.array([rows[i] for i in chosen], np.int64),
            float(t),
            np.array(list(chosen.values()), np.float64),
        )
        for i, v in chosen.items():
            model.setdefault(KEYS[i], deque(maxlen=length)).append((float(t), v))
    assert set(history) == set(model) and len(history) == len(model)
    for key, values in model.items():
        assert repr(history[key]) == repr(list(values))  # NaN compared by its text
    for key in set(KEYS) - set(model):
        assert key not in history
        with pytest.raises(KeyError):
            history[key]


def test_a_history_pickles_trimmed_and_grows_after() -> None:
    history = KpiHistory(4)
    for k in range(70):  # past the first 64 rows
        history.append(np.array([history.row((f"s{k}", "e"))]), 1.0, np.array([float(k)]))
    back = pickle.loads(pickle.dumps(history))
    assert len(back.head) == 70 and dict(back) == dict(history)
    back.append(np.array([back.row(("new", "e"))]), 2.0, np.array([5.0]))
    assert back[("new", "e")] == [(2.0, 5.0)] and back[("s3", "e")] == [(1.0, 3.0)]


def test_a_snapshots_dict_of_deques_moves_into_the_arrays() -> None:
    old = {KEYS[0]: deque([(0.0, 1.0), (15.0, 2.0), (30.0, 3.0)], maxlen=480), KEYS[1]: deque()}
    history = KpiHistory.of(old, length=2)
    assert dict(history) == {KEYS[0]: [(15.0, 2.0), (30.0, 3.0)]}


def test_a_history_keeps_at_least_one_value() -> None:
    with pytest.raises(ValueError, match="at least one"):
        KpiHistory(0)
