"""Evaluate the pack's diagnostic rules over findings, and run each rule's own fixtures.

A rule fires on an *anchor* finding (the symptom that names the fault), resolves the root-cause
entity from it (the anchor's entity, an upstream entity from the topology, or the SEPP of a
roaming partner), needs every ``require`` condition, gains each ``support`` weight seen, and
loses each ``refute`` weight seen (a ``require`` seen adds its weight too). The score also
rewards the share of the incident's other findings (beyond the anchor's own series) the
hypothesis explains: a lone anchor is uncorroborated. A ``candidate`` rule (a weak sign) is
capped under the no-fault baseline: listed to check, never the claim. Matches come back best
first; the application turns them into hypotheses with evidence and a calibrated confidence.

Findings are the application's :class:`~noc_assistant.models.Finding` (a domain model of the same
layer); a rule fixture's findings are built as such too (:func:`fixture_findings`).

>>> from knowledge.pack import load_pack
>>> pack = load_pack()
>>> [r for r in run_fixtures(pack) if not r.passed]
[]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.pack import Pack
from knowledge.schema import Condition, Rule, RuleFixture
from knowledge.topology import Topology, load_inventory
from noc_assistant.models import Finding

__all__ = [
    "ConditionHit",
    "FixtureResult",
    "Match",
    "evaluate",
    "fixture_findings",
    "no_fault_score",
    "run_fixtures",
]


@dataclass(frozen=True)
class ConditionHit:
    """A condition of a rule and the findings that satisfied it (empty: not seen)."""

    part: str
    """``anchor``, ``require``, ``support`` or ``refute``."""
    index: int
    condition: Condition
    findings: tuple[Finding, ...]


@dataclass
class Match:
    """One rule fired: a fault class on a root entity, with what it rests on."""

    rule: Rule
    root: str
    partner: str | None
    score: float
    anchor: Finding
    root_via: str
    """``anchor``, ``topology`` (upstream entity from the inventory), ``partner`` or ``guess``."""
    hits: list[ConditionHit] = field(default_factory=list)
    refutations: list[ConditionHit] = field(default_factory=list)
    missing: list[ConditionHit] = field(default_factory=list)
    """Support conditions not seen (what would have strengthened it)."""
    coverage: float = 0.0

    @property
    def fault(self) -> str:
        return self.rule.fault

    @property
    def finding_ids(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for hit in self.hits:
            for f in hit.findings:
                seen[f.id] = None
        return tuple(seen)


def no_fault_score(pack: Pack) -> float:
    """The score of the ``no_fault`` answer that a match must beat to be a claim (pack param
    ``no_fault_score``); the RCA, the fixture judge and the ``candidate`` cap all use this."""
    return pack.param("no_fault_score", 1.0)


def _labels(f: Finding) -> dict[str, str]:
    return dict(f.labels)


def _acts_as(f: Finding, nf_type: str, topology: Topology, pack: Pack) -> bool:
    """Whether the finding's entity is of ``nf_type`` (the inventory's type, else the one the
    finding was raised with), or acts as one in this finding: it plays that role (an EPC PGW
    plays the SMF's and the UPF's) and the finding's KPI is one of that role's. A PGW-C's
    lost PFCP peers are an SMF's symptom, so the UPF behind it is the root, not the PGW-C."""
    declared = topology.type_of(f.entity) or f.entity_type
    if declared == nf_type:
        return True
    if nf_type not in pack.roles(declared):
        return False
    kpi = pack.kpis.get(f.kpi)
    return kpi is None or kpi.applies_to(nf_type)


#: a finding's series: KPI, entity and labels
_Series = tuple[str, str, tuple[tuple[str, str], ...]]


def _series(f: Finding) -> _Series:
    return (f.kpi, f.entity, tuple(f.labels))


def _bound(value: float | str | None, pack: Pack) -> float | None:
    if value is None:
        return None
    return pack.param(value) if isinstance(value, str) else value


def _matches(cond: Condition, f: Finding, pack: Pack) -> bool:
    if f.kpi not in cond.kpis:
        return False
    if cond.direction != "both" and f.direction not in (cond.direction, "both"):
        return False
    low, high = _bound(cond.value_min, pack), _bound(cond.value_max, pack)
    if low is not None and f.observed < low:
        return False
    return not (high is not None and f.observed > high)


def _placement(cond: Condition, anchor: Finding, pack: Pack) -> Callable[[Finding], bool] | None:
    """The part of a condition's scope a finding itself decides (the entity's part,
    ``cond.scope``, is :func:`_seen`'s), as a test of the finding
    with what it reads of the anchor worked out once: its time against the anchor's
    (``order``), its KPI's target NF against the anchor's KPI's, its labels against the
    anchor's. None: the condition has no such test (every finding passes)."""
    order, same_t, differ_t = cond.order, cond.same_target, cond.differ_target
    same_l, differ_l = cond.same_labels, cond.differ_labels
    if order not in ("before", "after") and not (same_t or differ_t or same_l or differ_l):
        return None
    kpis = pack.kpis
    a_def = kpis.get(anchor.kpi)
    a_target = a_def.target_nf if a_def is not None else None
    al = _labels(anchor)
    wanted = [(name, al.get(name)) for name in same_l]
    unlike = [(name, al.get(name)) for name in differ_l]
    at = anchor.ts

    def placed(f: Finding) -> bool:
        if (order == "before" and f.ts > at) or (order == "after" and f.ts < at):
            return False
        if same_t or differ_t:
            f_def = kpis.get(f.kpi)
            if a_def is None or f_def is None:
                return False
            if same_t and a_target != f_def.target_nf:
                return False
            if differ_t and (not f_def.target_nf or f_def.target_nf == a_target):
                return False
        if wanted or unlike:
            fl = _labels(f)
            if any(fl.get(name) != value for name, value in wanted):
                return False
            for name, value in unlike:
                if name not in fl or fl[name] == value:
                    return False
        return True

    return placed


def _roots(
    rule: Rule,
    anchor: Finding,
    findings: Sequence[Finding],
    topology: Topology,
    pack: Pack,
    memo: _Memo | None = None,
) -> list[tuple[str, str | None, str, float]]:
    """(root entity, partner PLMN, how it was found, score penalty) candidates (``memo``:
    what the rule's other anchors worked out already)."""
    memo = memo if memo is not None else _Memo(findings)
    kind = rule.root.kind
    penalty = pack.param("candidate_without_findings_penalty", 0.3)
    if kind == "anchor":
        return [(anchor.entity, None, "anchor", 0.0)]
    if kind == "partner":
        labels = _labels(anchor)
        for name in rule.partner_from:
            value = labels.get(name)
            if not value:
                continue
            link = (
                topology.partner_for_plmn(value)
                if name == "plmnid"
                else topology.partner_for_addr(value)
            )
            if link is None:
                continue
            seps = topology.entities_of_type("sepp")
            # no SEPP known (no inventory): the border is named by its type, as a target is
            root = link.sepp or (seps[0] if len(seps) == 1 else anchor.entity if seps else "sepp")
            return [(root, link.plmn, "partner", 0.0)]
        return []
    if kind == "type":
        wanted = rule.root.type or ""
        if _acts_as(anchor, wanted, topology, pack):
            return [(anchor.entity, None, "anchor", 0.0)]
        cands = topology.upstream_candidates(anchor.entity, wanted, max_depth=1)
        cands = cands or topology.upstream_candidates(anchor.entity, wanted)
        if not cands:
            return [(anchor.entity, None, "guess", 2 * penalty)]
        if len(cands) == 1:
            return [(cands[0], None, "topology", 0.0)]
        with_findings = memo.entities()
        return [(c, None, "topology", 0.0 if c in with_findings else penalty) for c in cands]
    # target: the NF type the anchor's KPI calls
    target = pack.kpis[anchor.kpi].target_nf or ""
    cands = topology.upstream_candidates(anchor.entity, target, max_depth=2)
    if not cands:
        return [(target, None, "guess", penalty)]
    ups = memo.symptomatic.get((id(rule.anchor), target))
    if ups is None:
        symptomatic = {
            f.entity
            for f in memo.matching(rule.anchor, pack)
            if pack.kpis.get(f.kpi) is not None and pack.kpis[f.kpi].target_nf == target
        }
        ups = memo.symptomatic[(id(rule.anchor), target)] = [
            set(topology.upstream_candidates(e, target)) for e in symptomatic
        ]
    n_symptomatic = len(ups)
    out: list[tuple[str, str | None, str, float]] = []
    for c in cands:
        share = sum(1 for up in ups if c in up) / max(1, n_symptomatic)
        out.append((c, None, "topology", penalty * (1.0 - share)))
    return out


#: the findings a condition matches whatever the anchor and root, in the incident's order,
#: and the same by entity
_Matched = tuple[tuple[Finding, ...], dict[str, tuple[Finding, ...]]]


class _Memo:
    """What one rule's evaluation over an incident's ``findings`` works out once, whatever
    the anchor and root: per condition the findings it matches (:data:`_Matched`); per
    condition and anchor the findings a condition whose scope ignores the root holds; the
    entities with findings; per anchor condition and target NF the upstream candidates of
    each symptomatic entity. ``by_kpi``: the findings' positions by KPI (shared by the
    rules of one diagnosis: a condition reads only the findings of its KPIs)."""

    def __init__(
        self, findings: Sequence[Finding], by_kpi: Mapping[str, list[int]] | None = None
    ) -> None:
        self.findings = findings
        self.by_kpi = by_kpi if by_kpi is not None else _by_kpi(findings)
        self.matched: dict[int, _Matched] = {}
        self.held: dict[tuple[int, int], tuple[Finding, ...]] = {}
        self.symptomatic: dict[tuple[int, str], list[set[str]]] = {}
        self._entities: set[str] | None = None

    def entities(self) -> set[str]:
        if self._entities is None:
            self._entities = {f.entity for f in self.findings}
        return self._entities

    def matching(self, cond: Condition, pack: Pack) -> list[Finding]:
        """The findings ``cond`` matches (:func:`_matches`), in the incident's order."""
        at = [p for kpi in cond.kpis for p in self.by_kpi.get(kpi, ())]
        if len(cond.kpis) > 1:
            at = sorted(set(at))
        findings = self.findings
        return [findings[p] for p in at if _matches(cond, findings[p], pack)]


def _by_kpi(findings: Sequence[Finding]) -> dict[str, list[int]]:
    """Each KPI's findings' positions in ``findings``, in order."""
    out: dict[str, list[int]] = {}
    for p, f in enumerate(findings):
        out.setdefault(f.kpi, []).append(p)
    return out


#: the series of a tuple of findings (as numbers: :func:`_numbered`), by the tuple's id (the
#: tuple kept with them)
_Keys = dict[int, tuple[tuple[Finding, ...], frozenset[int]]]


def _numbered(findings: Sequence[Finding]) -> dict[int, int]:
    """Each finding's series (:func:`_series`) as a number, by the finding's id: one series
    one number, so sets of series are sets of small numbers."""
    numbers: dict[_Series, int] = {}
    return {id(f): numbers.setdefault(_series(f), len(numbers)) for f in findings}


def _series_of(found: tuple[Finding, ...], keys: _Keys, number: dict[int, int]) -> frozenset[int]:
    """The series of ``found`` (numbered by ``number``), worked out once per tuple: the
    findings a condition holds for an anchor are one tuple for all its roots (:func:`_seen`)."""
    kept = keys.get(id(found))
    if kept is None:
        kept = keys[id(found)] = (found, frozenset(number[id(f)] for f in found))
    return kept[1]


def _seen(
    cond: Condition,
    anchor: Finding,
    root: str,
    topology: Topology,
    pack: Pack,
    memo: _Memo,
) -> tuple[Finding, ...]:
    """The findings that meet ``cond`` for this anchor and root, in the incident's order. A
    scope that does not name the root (``anchor``, ``any``, ``other``) gives every root of an
    anchor the same answer, so it is worked out once per anchor."""
    key = (id(cond), id(anchor))
    if cond.scope in ("anchor", "any", "other"):
        kept = memo.held.get(key)
        if kept is not None:
            return kept
    pool = _pool(cond, anchor, root, pack, memo)
    if cond.scope == "related":  # an entity within one link of the anchor's or the root's
        near = topology.around(anchor.entity) | topology.around(root)
        pool = tuple(f for f in pool if f.entity in near)
    elif cond.scope == "other":
        pool = tuple(f for f in pool if f.entity != anchor.entity)
    # (anchor, root, any: the pool holds only entities in scope)
    placed = _placement(cond, anchor, pack)
    out = pool if placed is None else tuple(filter(placed, pool))
    if cond.scope in ("anchor", "any", "other"):
        memo.held[key] = out
    return out


def _pool(
    cond: Condition, anchor: Finding, root: str, pack: Pack, memo: _Memo
) -> tuple[Finding, ...]:
    """The findings ``cond`` matches that its scope can take (a superset, in the incident's
    order): those of the anchor's or the root's entity for those scopes, else all it
    matches. Matched once per condition (``memo``), however many anchors and roots ask."""
    hit = memo.matched.get(id(cond))
    if hit is None:
        found = memo.matching(cond, pack)
        by_entity: dict[str, list[Finding]] = {}
        for f in found:
            by_entity.setdefault(f.entity, []).append(f)
        hit = memo.matched[id(cond)] = (
            tuple(found),
            {e: tuple(fs) for e, fs in by_entity.items()},
        )
    if cond.scope == "anchor":
        return hit[1].get(anchor.entity, ())
    if cond.scope == "root":
        return hit[1].get(root, ())
    return hit[0]


def _evaluate_rule(
    rule: Rule,
    findings: Sequence[Finding],
    topology: Topology,
    pack: Pack,
    number: dict[int, int] | None = None,
    by_kpi: Mapping[str, list[int]] | None = None,
    every: frozenset[int] | None = None,
) -> list[Match]:
    """The rule's matches (``number``: the series of ``findings`` numbered by
    :func:`_numbered`, ``by_kpi``: their positions by KPI, ``every``: all their series
    numbers, when the caller has them)."""
    memo = _Memo(findings, by_kpi)
    anchored = memo.matching(rule.anchor, pack)
    anchors: dict[tuple[str, tuple[tuple[str, str], ...]], Finding] = {}
    alike: dict[tuple[str, tuple[tuple[str, str], ...]], list[Finding]] = {}
    for f in anchored:
        key = (f.entity, tuple(sorted(f.labels)))
        if key not in anchors or f.ts < anchors[key].ts:
            anchors[key] = f
        alike.setdefault((f.entity, tuple(f.labels)), []).append(f)
    if number is None:
        number = _numbered(findings)
    every_series = frozenset(number.values()) if every is None else every
    coverage_weight = pack.param("coverage_weight", 0.5)
    out: list[Match] = []
    keys: _Keys = {}
    for anchor in anchors.values():
        # the anchored findings of the anchor's entity and labels, in the incident's order
        own_found = tuple(alike[(anchor.entity, tuple(anchor.labels))])
        for root, partner, via, penalty in _roots(rule, anchor, findings, topology, pack, memo):
            anchor_hit = ConditionHit("anchor", 0, rule.anchor, own_found)
            match = Match(rule, root, partner, 0.0, anchor, via, hits=[anchor_hit])
            score = rule.prior - penalty
            ok = True
            for part in ("require", "support", "refute"):
                conds: tuple[Condition, ...] = getattr(rule, part)
                for i, cond in enumerate(conds):
                    seen = _seen(cond, anchor, root, topology, pack, memo)
                    if part == "refute":
                        if seen:
                            match.refutations.append(ConditionHit(part, i, cond, seen))
                            score -= cond.weight
                    elif seen:
                        match.hits.append(ConditionHit(part, i, cond, seen))
                        score += cond.weight
                    elif part == "require":
                        ok = False
                        break
                    else:
                        match.missing.append(ConditionHit(part, i, cond, seen))
                if not ok:
                    break
            if not ok:
                continue
            # coverage: the share of the incident's *other* series (beyond the anchor's own)
            # the hypothesis explains; a lone anchor is not corroborated by anything. Series,
            # not findings: a KPI reported again as it grew is one symptom, not several
            own = _series_of(own_found, keys, number)
            others = every_series - own
            explained = (
                set().union(*(_series_of(h.findings, keys, number) for h in match.hits)) - own
            )
            match.coverage = len(explained) / len(others) if others else 0.0
            match.score = score + coverage_weight * match.coverage
            if rule.candidate:  # a weak sign never outranks the no-fault answer
                match.score = min(match.score, no_fault_score(pack) - 0.05)
            out.append(match)
    return out


def evaluate(
    findings: Sequence[Finding],
    topology: Topology,
    pack: Pack,
    rules: Iterable[Rule] | None = None,
) -> list[Match]:
    """Every rule's best match per (fault, root entity), best first."""
    best: dict[tuple[str, str], Match] = {}
    order: dict[str, int] = {}
    number = _numbered(findings)
    by_kpi = _by_kpi(findings)
    every = frozenset(number.values())
    for n, rule in enumerate(rules if rules is not None else pack.rules.values()):
        order[rule.id] = n
        for match in _evaluate_rule(rule, findings, topology, pack, number, by_kpi, every):
            key = (match.fault, match.root)
            if key not in best or match.score > best[key].score:
                best[key] = match
    return sorted(best.values(), key=lambda m: (-m.score, order[m.rule.id], m.root))


# ---------------------------------------------------------------- fixtures


_FIXTURE_T0 = 1_790_000_000.0


def fixture_findings(
    rule_id: str, index: int, fixture: RuleFixture, topology: Topology
) -> list[Finding]:
    """The fixture's findings as findings of detector ``fixture`` (timestamps from a fixed
    origin)."""
    return [
        Finding(
            id=f"fx-{rule_id}-{index}-{j}",
            detector="fixture",
            kpi=f.kpi,
            entity=f.entity,
            entity_type=topology.type_of(f.entity),
            ts=_FIXTURE_T0 + f.t,
            score=f.score,
            observed=f.observed,
            expected_low=f.expected_low,
            expected_high=f.expected_high,
            direction=f.direction,
            labels=tuple(sorted(f.labels.items())),
        )
        for j, f in enumerate(fixture.findings)
    ]


@dataclass(frozen=True)
class FixtureResult:
    rule_id: str
    name: str
    positive: bool
    passed: bool
    detail: str


def run_fixtures(pack: Pack, rule_ids: Iterable[str] | None = None) -> list[FixtureResult]:
    """Run every rule's fixtures against the whole pack (like ``promtool test rules``).

    A positive fixture passes when the rule yields the expected fault on the expected entity
    (and partner) and, unless ``rank1: false``, that hypothesis ranks first over all rules.
    A negative fixture passes when the rule's hypothesis does not rank first among the matches
    scoring at least the pack's ``min_score`` and above its ``no_fault_score`` (weaker ones are
    not claims: the RCA answers ``no_fault`` over them).
    """
    topologies: dict[Path, Topology] = {}
    wanted = set(rule_ids) if rule_ids is not None else None
    results: list[FixtureResult] = []
    for rule in pack.rules.values():
        if wanted is not None and rule.id not in wanted:
            continue
        for i, fixture in enumerate(rule.tests):
            path = pack.fixture_path(fixture.inventory)
            if path not in topologies:
                topologies[path] = load_inventory(path, pack)
            topology = topologies[path]
            findings = fixture_findings(rule.id, i, fixture, topology)
            matches = evaluate(findings, topology, pack)
            own = evaluate(findings, topology, pack, rules=[rule])
            floor = pack.param("min_score", 0.5)
            results.append(_judge(rule, fixture, matches, own, floor, no_fault_score(pack)))
    return results


def _judge(
    rule: Rule,
    fixture: RuleFixture,
    matches: list[Match],
    rule_matches: list[Match],
    floor: float,
    baseline: float = float("-inf"),
) -> FixtureResult:
    claims = [m for m in matches if m.score >= floor and m.score > baseline]
    top = claims[0] if claims else None
    top_text = f"{top.fault} on {top.root} ({top.rule.id}, {top.score:.2f})" if top else "nothing"
    expect = fixture.expect
    if expect is None:
        passed = top is None or top.rule.id != rule.id
        return FixtureResult(rule.id, fixture.name, False, passed, f"top: {top_text}")
    own = [
        m
        for m in rule_matches
        if m.fault == expect.fault
        and m.root == expect.entity
        and (expect.partner is None or m.partner == expect.partner)
    ]
    if not own:
        found = [f"{m.fault} on {m.root}" for m in rule_matches]
        detail = f"rule gave {found or 'no match'}; expected {expect.fault} on {expect.entity}"
        return FixtureResult(rule.id, fixture.name, True, False, detail)
    if fixture.rank1 and top is not None and (top.fault, top.root) != (expect.fault, expect.entity):
        return FixtureResult(rule.id, fixture.name, True, False, f"ranked first: {top_text}")
    return FixtureResult(rule.id, fixture.name, True, True, f"top: {top_text}")


def summarize(results: Sequence[FixtureResult]) -> Mapping[str, int]:
    passed = sum(1 for r in results if r.passed)
    return {"total": len(results), "passed": passed, "failed": len(results) - passed}
