"""KPI formulas: a small, safe expression language over counters, gauges and histograms.

A formula is a Python-syntax expression built only from numbers, ``+ - * /``, ``min``/``max``
and these selector functions (first argument the metric name, keywords are label matchers,
``"a|b"`` matches either value)::

    increase("m", cause="22")   counter increase over the KPI window, summed over series
    rate("m")                   increase / window seconds
    gauge("m")                  latest value, summed over matching series
    gauge_mean("m"), gauge_max("m"), gauge_min("m")
    hist_mean("m")              increase(m_sum) / increase(m_count) of a histogram
    present("m")                share of the matching series that answered within the KPI
                                window, or the liveness grace where that is longer (an
                                exporter gone silent while its entity's others answer:
                                Prometheus' ``up == 0`` for one target of a host; one missed
                                scrape is routine, at PM periods too)

``first(a, b, ...)`` is the first of its expressions that has a value: one KPI over exporters
that name the same quantity differently (a vLLM or an SGLang engine on a GPU server), read
from whichever the entity runs. ``min``/``max`` likewise skip expressions without a value.

Division by zero or a missing series gives ``None`` (a gap), never zero.

>>> f = parse_formula('increase("succ") / increase("req")')
>>> sorted(f.metrics)
['req', 'succ']
>>> class Source:
...     def select(self, fn, metric, matchers):
...         return {"succ": 95.0, "req": 100.0}[metric]
>>> f.evaluate(Source())
0.95
>>> g = parse_formula('first(gauge("vllm:num_requests_waiting"), gauge("sglang:num_queue_reqs"))')
>>> class Engine:
...     def __init__(self, prefix):
...         self.prefix = prefix
...     def select(self, fn, metric, matchers):
...         return 7.0 if metric.startswith(self.prefix) else None
>>> g.evaluate(Engine("sglang:")), g.evaluate(Engine("vllm:")), g.evaluate(Engine("tgi:"))
(7.0, 7.0, None)
>>> parse_formula("up()").liveness, f.liveness
(True, False)
>>> parse_formula("1 - up()")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
knowledge.formula.FormulaError: up() is a whole formula (the entity answers or not)
>>> parse_formula('open("/etc/passwd")')  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
knowledge.formula.FormulaError: unknown function 'open' (allowed: first, gauge, gauge_max, ...
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from noc_assistant.errors import ConfigError

__all__ = ["LIVENESS", "SELECTORS", "Formula", "FormulaError", "SelectorSource", "parse_formula"]

SELECTORS = frozenset(
    {"increase", "rate", "gauge", "gauge_mean", "gauge_max", "gauge_min", "hist_mean", "present"}
)
#: the selector of a whole entity's liveness; it reads no metric (see the module docstring)
LIVENESS = "up"
#: folds over expressions that have a value (``None`` ones are skipped)
_AGGREGATES: dict[str, Callable[[float, float], float]] = {"min": min, "max": max}
#: the first of its expressions that has a value (the later ones are not evaluated)
_FIRST = "first"
_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


class FormulaError(ConfigError, ValueError):
    """A KPI formula that does not parse or uses something not allowed (exit 2)."""


class SelectorSource(Protocol):
    """What a formula reads its data from (the pipeline's per-entity series store)."""

    def select(self, fn: str, metric: str, matchers: Mapping[str, str]) -> float | None:
        """Value of selector ``fn`` over series named ``metric`` matching ``matchers``."""


@dataclass(frozen=True)
class Selector:
    fn: str
    metric: str
    matchers: tuple[tuple[str, str], ...]


#: a compiled formula node: reads the selector source, returns a value or ``None`` (a gap)
_Node = Callable[["SelectorSource"], float | None]


@dataclass(frozen=True)
class Formula:
    """A parsed formula; :meth:`evaluate` it against a :class:`SelectorSource`.

    The syntax tree is compiled once, at parse time, into nested closures (no node dispatch
    per evaluation: the pipeline evaluates every KPI of every entity at every tick).
    """

    text: str
    tree: ast.expr = field(repr=False)
    selectors: tuple[Selector, ...]
    _run: _Node = field(repr=False, compare=False)

    @property
    def metrics(self) -> frozenset[str]:
        """Metric names the formula reads (histograms by their base name)."""
        return frozenset(s.metric for s in self.selectors if s.fn != LIVENESS)

    @property
    def liveness(self) -> bool:
        """Whether this is ``up()``: the entity's liveness, judged on the clock."""
        return self.selectors[0].fn == LIVENESS

    def evaluate(self, source: SelectorSource) -> float | None:
        """Value of the formula, or ``None`` where data is missing or a division is by zero."""
        value = self._run(source)
        if value is None or math.isnan(value) or math.isinf(value):
            return None
        return value


def parse_formula(text: str) -> Formula:
    """Parse and check ``text``; raise :class:`FormulaError` naming what is wrong."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise FormulaError(f"syntax error in formula {text!r}: {exc.msg}") from None
    selectors: list[Selector] = []
    if _is_liveness(tree):
        return Formula(text=text, tree=tree, selectors=(Selector(LIVENESS, "", ()),), _run=_up)
    _check(tree, selectors)
    if not selectors:
        raise FormulaError(f"formula {text!r} reads no metric")
    return Formula(text=text, tree=tree, selectors=tuple(selectors), _run=_compile(tree))


def _is_liveness(tree: ast.expr) -> bool:
    return (
        isinstance(tree, ast.Call)
        and isinstance(tree.func, ast.Name)
        and tree.func.id == LIVENESS
        and not tree.args
        and not tree.keywords
    )


def _up(source: SelectorSource) -> float | None:
    return source.select(LIVENESS, "", MappingProxyType({}))


def _check(node: ast.expr, out: list[Selector]) -> None:
    allowed = ", ".join(sorted(SELECTORS | set(_AGGREGATES) | {_FIRST, LIVENESS}))
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left, out)
        _check(node.right, out)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, out)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name in _AGGREGATES or name == _FIRST:
            if node.keywords or len(node.args) < 2:
                raise FormulaError(f"{name}() takes two or more expressions")
            for arg in node.args:
                _check(arg, out)
            return
        if name == LIVENESS:
            raise FormulaError(
                "up() is a whole formula (the entity answers or not)"
                if not node.args and not node.keywords
                else "up() takes no arguments"
            )
        if name not in SELECTORS:
            raise FormulaError(f"unknown function {name!r} (allowed: {allowed})")
        if len(node.args) != 1 or not (
            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
        ):
            raise FormulaError(f"{name}() takes one metric name as a string literal")
        matchers: list[tuple[str, str]] = []
        for kw in node.keywords:
            if kw.arg is None or not (
                isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)
            ):
                raise FormulaError(f'{name}(): label matchers must be name="value"')
            matchers.append((kw.arg, kw.value.value))
        out.append(Selector(name, node.args[0].value, tuple(sorted(matchers))))
        return
    raise FormulaError(f"not allowed in a formula: {ast.unparse(node)!r}")


def _compile(node: ast.expr) -> _Node:
    """Closure computing ``node`` (already checked by :func:`_check`)."""
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)
        const = float(node.value)
        return lambda source: const
    if isinstance(node, ast.UnaryOp):
        inner = _compile(node.operand)

        def negate(source: SelectorSource) -> float | None:
            v = inner(source)
            return None if v is None else -v

        return negate
    if isinstance(node, ast.BinOp):
        left, right, op = _compile(node.left), _compile(node.right), _BINOPS[type(node.op)]
        divide = isinstance(node.op, ast.Div)

        def binop(source: SelectorSource) -> float | None:
            a = left(source)
            if a is None:
                return None
            b = right(source)
            if b is None or (divide and b == 0):
                return None
            return op(a, b)

        return binop
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    name = node.func.id
    if name == _FIRST:
        options = [_compile(a) for a in node.args]

        def first(source: SelectorSource) -> float | None:
            for option in options:
                v = option(source)
                if v is not None:
                    return v
            return None

        return first
    if name in _AGGREGATES:
        args, agg = [_compile(a) for a in node.args], _AGGREGATES[name]

        def aggregate(source: SelectorSource) -> float | None:
            result: float | None = None
            for arg in args:
                v = arg(source)
                if v is not None:
                    result = v if result is None else agg(result, v)
            return result

        return aggregate
    metric = str(node.args[0].value)  # type: ignore[attr-defined]
    matchers = MappingProxyType(
        {str(kw.arg): str(kw.value.value) for kw in node.keywords}  # type: ignore[attr-defined]
    )
    return lambda source: source.select(name, metric, matchers)
