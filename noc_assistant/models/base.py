"""The base of the domain models (:mod:`noc_assistant.models`): what every one of them shares."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["FrozenModel", "Model"]


class Model(BaseModel):
    """Base of the models: one pickled by an earlier version (a pipeline snapshot,
    :mod:`noc_assistant.stream.checkpoint`) that lacks a field added since gets its default, so an
    upgraded worker resumes from the state its previous version left.

    >>> from noc_assistant.models import Finding
    >>> f = Finding(id="f", detector="d", kpi="k", entity="e", ts=0.0, score=2.0,
    ...             observed=1.0, expected_low=0.0, expected_high=0.5, direction="up")
    >>> state = f.__getstate__()
    >>> old = {k: v for k, v in state["__dict__"].items() if k != "held_by"}
    >>> g = Finding.__new__(Finding)
    >>> g.__setstate__({**state, "__dict__": old})
    >>> g.held_by is None, g == f
    (True, True)
    """

    def __setstate__(self, state: dict[Any, Any]) -> None:
        values = state.get("__dict__")
        if isinstance(values, dict):
            missing = {
                name: field.get_default(call_default_factory=True)
                for name, field in type(self).model_fields.items()
                if name not in values and not field.is_required()
            }
            if missing:
                state = {**state, "__dict__": {**values, **missing}}
        super().__setstate__(state)


class FrozenModel(Model):
    """A model whose instances never change (hashable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
