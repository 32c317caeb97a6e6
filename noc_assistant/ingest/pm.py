"""3GPP PM files (TS 32.435 ``measCollecFile`` and the TS 28.550 ``MeasDataFile`` variant): the
drops an OSS collects from network functions every granularity period.

A file holds, per measured object (``measObjLdn``), one value per measurement type for one
period: a count of events in that period (``RM.RegInitReq``), or a mean/max/number sampled over
it (``RM.RegisteredSubNbrMean``). :func:`pm_points` reads a set of files in period order and
turns them into FORMATS §1 points with the names the pack's KPIs use, those of Open5GS' exporter,
which follow the same measurements:

- ``RM.RegInitReq`` on ``…,AMFFunction=1`` → ``fivegs_amffunction_rm_reginitreq``; an endpoint
  object (``…,UPFFunction=1,EP_N3=1``) names the prefix itself (``fivegs_ep_n3_…``), as Open5GS
  does.
- A sub-counter suffix becomes a label: an S-NSSAI (``1-000001``) ``snssai``, a PLMN
  (``PLMN99970``, MCC and MNC digits; the vendor-specific form vendors give their per-PLMN
  splits) ``plmnid``, a number ``cause`` (5GMM/5GSM causes, QCI/5QI for the delay
  measurements), anything else ``sub``.
- A measurement the knowledge pack names (``measurements/*.yaml``: a vendor-specific
  ``VS.GnbNbrMean`` on an AMF is Open5GS' ``gnb``) is read under the pack's metric name
  (``vendor``: :meth:`knowledge.pack.Pack.pm_names`), its sub-counters as the labels the pack
  names for them (``VS.SbiClientReq.nausf-auth.POST.201`` → ``target_service_name``,
  ``method``, ``status_code``); without it, under its derived ``fivegs_amffunction_vs_gnbnbr``.
- The entity (``instance``) is the measured object's LDN up to its network function
  (``ManagedElement=5gc-ams-01,AMFFunction=1``), the ``nf`` label its type (``amf``); deeper RDNs
  (``EP_N3=1``) go to the ``object`` label. Given the names of an inventory (:func:`ldn_names`:
  an entity's ``ldn`` key, or ``ManagedElement=<id>,<Type>Function=1`` for an entity of a
  network-function type), a function the inventory knows is named by its id instead, the LDN
  kept in the ``ldn`` label: the inventory and the labels name ``amf-07``, not its LDN. An
  element may hold several functions (an AMF and two SMFs), which is why the element's name
  alone does not name an entity.
- A status measurement's mean (``RM.RegisteredSubNbrMean``) is read under the exporter's gauge
  name (``fivegs_amffunction_rm_registeredsubnbr``, which the pack's KPIs read); its maximum
  and minimum get ``_max`` / ``_min``.
- Counts become cumulative counters (a running sum per series, in period order), so that
  ``increase()`` reads them as it reads a scraped counter. After a missing period, a ``NIL``
  value or a ``suspect`` one (a gap: the value is not used), the sum starts again from the next
  period's count, which the series store reads as a reset: the windows that would straddle the
  lost period are gaps, not low values. Means, maxima and numbers (``…Mean``, ``…Max``,
  ``…Nbr…``) are gauges.
- A file that is not well-formed XML, or not a PM file, is quarantined whole (the file and the
  parser's line); a value that is not a finite number likewise, with its measInfo and object, a
  measurement type or result whose position ``p`` is not a number (``<r p="three">``: that
  one entry, not the file or the conversion), and a period that ends outside the reader's
  :class:`~noc_assistant.ingest.window.TimeWindow` (that measInfo). Nothing is read as zero.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from noc_assistant.ingest.point import Point
from noc_assistant.ingest.quarantine import Quarantine
from noc_assistant.ingest.window import REPLAY_WINDOW, TimeWindow

__all__ = [
    "FUNCTION_CLASSES",
    "PmValue",
    "VendorNames",
    "ldn_names",
    "metric_name",
    "pm_points",
    "read_pm_file",
]

#: the managed function class (TS 28.541 / TS 28.708) of each network function type
FUNCTION_CLASSES: Mapping[str, str] = {
    "amf": "AMFFunction",
    "smf": "SMFFunction",
    "upf": "UPFFunction",
    "pcf": "PCFFunction",
    "nrf": "NRFFunction",
    "udm": "UDMFunction",
    "ausf": "AUSFFunction",
    "nssf": "NSSFFunction",
    "sepp": "SEPPFunction",
    "mme": "MMEFunction",
    "sgw": "SGWFunction",
    "pgw": "PGWFunction",
    "hss": "HSSFunction",
}

VendorNames = Mapping[tuple[str, str], tuple[str, tuple[str, ...]]]
"""(NF type, measurement without aggregation and sub-counters) → (metric, the labels its
sub-counters carry in order, or none for the usual reading):
:meth:`knowledge.pack.Pack.pm_names`."""

_SNSSAI = re.compile(r"^\d{1,3}-[0-9A-Fa-f]{6}$")
_PLMN = re.compile(r"^PLMN(\d{5,6})$")
_GAUGE = re.compile(r"(Mean|Max|Min|Nbr|Ratio|Rate)")
_AGGREGATION = re.compile(r"(Mean|Max|Min)$")


@dataclass(frozen=True)
class PmValue:
    """One measurement of one object for one period (``value`` None: NIL or suspect)."""

    end: float
    duration: float
    ldn: str
    meas_type: str
    value: float | None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(el: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in el if _local(c.tag) == name]


def _time(text: str | None, where: str) -> float:
    if not text:
        raise ValueError(f"{where}: missing time")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        raise ValueError(f"{where}: {text!r} is not an ISO 8601 time with offset") from None


def _duration(text: str | None) -> float:
    m = re.fullmatch(r"PT(\d+)S", text or "")
    if m is None:
        raise ValueError(f"granPeriod duration {text!r} is not PTnS")
    return float(m.group(1))


def _number(text: str) -> float | None:
    if text.strip().upper() == "NIL":
        return None
    number = float(text)  # ValueError names the text
    if math.isinf(number):
        raise ValueError(text)
    return None if math.isnan(number) else number


def _position(raw: str | None) -> int | None:
    """A ``p`` attribute (a measurement's position in its measInfo), None if it is no number.

    >>> _position("3"), _position("three"), _position(None), _position("-1")
    (3, None, None, None)
    """
    text = (raw or "").strip()
    return int(text) if text.isdecimal() and text.isascii() else None


def read_pm_file(
    path: Path, quarantine: Quarantine, window: TimeWindow | None = REPLAY_WINDOW
) -> list[PmValue]:
    """The measurements of one PM file; a file that cannot be read is quarantined whole, a
    period ending outside ``window`` (None: any time) that period."""
    root = _pm_root(path, quarantine)
    if root is None:
        return []
    out: list[PmValue] = []
    for data in _children(root, "measData") + _children(root, "MeasData"):
        for info in _children(data, "measInfo"):
            out += _meas_info(info, str(path), quarantine, window)
    return out


def _pm_root(path: Path, quarantine: Quarantine) -> ET.Element | None:
    """The root element of a PM file; None (the file quarantined) where it is no readable XML
    or not a PM file."""
    source = str(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        quarantine.add(source, exc.position[0], f"not well-formed XML: {exc}", "")
        return None
    except OSError as exc:
        quarantine.add(source, None, f"cannot read: {exc.strerror or exc}", "")
        return None
    except (ValueError, LookupError) as exc:  # an encoding the parser does not know
        quarantine.add(source, None, f"not readable XML: {exc}", "")
        return None
    if _local(root.tag) not in ("measCollecFile", "MeasDataFile"):
        quarantine.add(source, None, f"root <{_local(root.tag)}> is not a 3GPP PM file", "")
        return None
    return root


def _meas_info(
    info: ET.Element, source: str, quarantine: Quarantine, window: TimeWindow | None
) -> list[PmValue]:
    """The measurements of one ``measInfo``; none (it quarantined) where its period cannot be
    read or ends outside ``window``."""
    info_id = info.get("measInfoId", "?")
    try:
        gran = _children(info, "granPeriod")
        if not gran:
            raise ValueError("no granPeriod")
        end = _time(gran[0].get("endTime"), f"measInfo {info_id} granPeriod")
        if window is not None:
            window.check(end)
        duration = _duration(gran[0].get("duration"))
    except ValueError as exc:
        quarantine.add(source, None, f"measInfo {info_id}: {exc}", "")
        return []
    names = _type_names(info, info_id, source, quarantine)
    out: list[PmValue] = []
    for mv in _children(info, "measValue"):
        raw = _results(mv, info_id, source, quarantine)
        out += _values(mv, raw, names, (end, duration), info_id, source, quarantine)
    return out


def _type_names(
    info: ET.Element, info_id: str, source: str, quarantine: Quarantine
) -> dict[int, str]:
    """The measurement types of a ``measInfo`` by position (``measTypes``, or ``measType``
    elements with a ``p`` each; one without a position quarantined)."""
    listed = _children(info, "measTypes")
    names: dict[int, str] = {}
    if listed:
        names = dict(enumerate((listed[0].text or "").split(), start=1))
    for t in [] if listed else _children(info, "measType"):
        p = _position(t.get("p"))
        if p is None:
            reason = f"measInfo {info_id}: measType p={t.get('p')!r} is not a position"
            quarantine.add(source, None, reason, (t.text or "").strip())
            continue
        names[p] = (t.text or "").strip()
    return names


def _results(mv: ET.Element, info_id: str, source: str, quarantine: Quarantine) -> dict[int, str]:
    """The raw values of a ``measValue`` by position (``measResults``, or ``r`` elements with a
    ``p`` each; one without a position quarantined)."""
    ldn = mv.get("measObjLdn", "")
    results = _children(mv, "measResults")
    raw: dict[int, str] = {}
    if results:
        raw = dict(enumerate((results[0].text or "").split(), start=1))
    for r in [] if results else _children(mv, "r"):
        p = _position(r.get("p"))
        if p is None:
            reason = f"measInfo {info_id} {ldn}: r p={r.get('p')!r} is not a position"
            quarantine.add(source, None, reason, r.text or "")
            continue
        raw[p] = r.text or ""
    return raw


def _values(
    mv: ET.Element,
    raw: Mapping[int, str],
    names: Mapping[int, str],
    period: tuple[float, float],
    info_id: str,
    source: str,
    quarantine: Quarantine,
) -> list[PmValue]:
    """The measurements of one ``measValue`` (its object) for the ``(end, duration)`` period: a
    value without a type or not a finite number quarantined, a suspect one quarantined and
    kept as a gap (None)."""
    ldn = mv.get("measObjLdn", "")
    suspect = any((s.text or "").strip() == "true" for s in _children(mv, "suspect"))
    out: list[PmValue] = []
    for p, text in sorted(raw.items()):
        name = names.get(p)
        if name is None:
            quarantine.add(source, None, f"measInfo {info_id} {ldn}: no type for p={p}", text)
            continue
        try:
            value = _number(text)
        except ValueError:
            quarantine.add(
                source,
                None,
                f"measInfo {info_id} {ldn} {name}: {text!r} is not a finite number",
                text,
            )
            continue
        if suspect and value is not None:
            quarantine.add(source, None, f"measInfo {info_id} {ldn} {name}: suspect", text)
            value = None
        out.append(PmValue(*period, ldn, name, value))
    return out


def metric_name(
    ldn: str, meas_type: str, vendor: VendorNames | None = None
) -> tuple[str, dict[str, str], str]:
    """(metric, labels, FORMATS §1 type) of a measurement of an object; ``vendor`` names
    measurements (:data:`VendorNames`).

    >>> metric_name("ManagedElement=5gc-ams-01,AMFFunction=1", "RM.RegInitFail.22")
    ('fivegs_amffunction_rm_reginitfail', {'instance': 'ManagedElement=5gc-ams-01,AMFFunction=1', \
'nf': 'amf', 'cause': '22'}, 'counter')
    >>> metric_name("ManagedElement=m,UPFFunction=1,EP_N3=1", "GTP.InDataOctN3UPF.1-000001")[:2]
    ('fivegs_ep_n3_gtp_indataoctn3upf', {'instance': 'ManagedElement=m,UPFFunction=1', \
'nf': 'upf', 'object': 'EP_N3=1', 'snssai': '1-000001'})
    >>> metric_name("ManagedElement=m,AMFFunction=1", "RM.RegisteredSubNbrMean.1-000001")[::2]
    ('fivegs_amffunction_rm_registeredsubnbr', 'gauge')
    >>> metric_name("ManagedElement=m,AMFFunction=1", "RM.RegisteredSubNbrMax")[::2]
    ('fivegs_amffunction_rm_registeredsubnbr_max', 'gauge')
    >>> metric_name("ManagedElement=m,AMFFunction=1", "RM.RegInitReq.PLMN99970")[1]["plmnid"]
    '99970'
    >>> metric_name("ManagedElement=m,AMFFunction=1", "VS.GnbNbrMean",
    ...             {("amf", "VS.GnbNbr"): ("gnb", ())})[::2]
    ('gnb', 'gauge')
    >>> metric_name("ManagedElement=m,SMFFunction=1", "VS.SbiClientReq.nudm-sdm.GET.504",
    ...             {("smf", "VS.SbiClientReq"): ("sbi_req", ("service", "method", "code"))})
    ('sbi_req', {'instance': 'ManagedElement=m,SMFFunction=1', 'nf': 'smf', \
'service': 'nudm-sdm', 'method': 'GET', 'code': '504'}, 'counter')
    """
    rdns = [r.strip() for r in ldn.split(",") if r.strip()]
    fn = next((i for i, r in enumerate(rdns) if r.split("=", 1)[0].endswith("Function")), None)
    entity_rdns = rdns if fn is None else rdns[: fn + 1]
    labels = {"instance": ",".join(entity_rdns)}
    prefix_rdn = rdns[-1].split("=", 1)[0] if rdns else "object"
    if fn is not None:
        labels["nf"] = rdns[fn].split("=", 1)[0].removesuffix("Function").lower()
        if len(rdns) > fn + 1:
            labels["object"] = ",".join(rdns[fn + 1 :])
    parts = meas_type.split(".")
    # a status measurement's aggregation (TS 28.552 RM.RegisteredSubNbrMean / …Max): the mean
    # is the gauge an exporter reports (fivegs_amffunction_rm_registeredsubnbr), the maximum
    # and minimum are their own metrics (…_max, …_min)
    aggregation = ""
    if len(parts) > 1:
        m = _AGGREGATION.search(parts[1])
        if m is not None and m.start() > 0:
            parts[1] = parts[1][: m.start()]
            aggregation = "" if m.group(1) == "Mean" else "_" + m.group(1).lower()
    base = ".".join(parts[:2])
    # the pack's names are those of the function object itself, not of its endpoints
    on_function = fn is not None and len(rdns) == fn + 1
    named = (vendor or {}).get((labels.get("nf", ""), base)) if on_function else None
    extras = parts[2:]
    if named is not None and named[1] and len(named[1]) == len(extras):
        labels.update(zip(named[1], extras, strict=True))
        extras = []
    for extra in extras:
        plmn = _PLMN.match(extra)
        if _SNSSAI.match(extra):
            labels["snssai"] = extra
        elif plmn is not None and "plmnid" not in labels:
            labels["plmnid"] = plmn.group(1)
        elif extra.isdigit() and "cause" not in labels:
            labels["cause"] = extra
        else:
            labels["sub"] = extra if "sub" not in labels else f"{labels['sub']}.{extra}"
    if named is not None:
        metric = named[0]
    else:
        metric = "fivegs_" + re.sub(
            r"[^a-z0-9_]", "_", f"{prefix_rdn}_{base}".lower().replace(".", "_")
        )
    metric += aggregation
    gauge = bool(aggregation) or _GAUGE.search(parts[1] if len(parts) > 1 else meas_type)
    kind = "gauge" if gauge else "counter"
    return metric, labels, kind


def ldn_names(
    types: Mapping[str, str], attributes: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, str]:
    """LDN of a network function → the inventory's id for it: the entity's own ``ldn`` key
    where it has one (``attributes``: the inventory's keys per entity), else
    ``ManagedElement=<id>,<Class>=1`` for an entity of a network-function type.

    >>> ldn_names({"amf-1": "amf", "gpu-srv-1": "gpu_server", "smf-9": "smf"},
    ...           {"smf-9": {"ldn": "ManagedElement=core-1,SMFFunction=2"}})
    {'ManagedElement=amf-1,AMFFunction=1': 'amf-1', 'ManagedElement=core-1,SMFFunction=2': 'smf-9'}
    """
    out: dict[str, str] = {}
    for entity, kind in types.items():
        explicit = (attributes or {}).get(entity, {}).get("ldn")
        if isinstance(explicit, str) and explicit.strip():
            out[",".join(r.strip() for r in explicit.split(",") if r.strip())] = entity
        elif kind in FUNCTION_CLASSES:
            out.setdefault(f"ManagedElement={entity},{FUNCTION_CLASSES[kind]}=1", entity)
    return out


def pm_points(
    paths: Iterable[Path],
    quarantine: Quarantine | None = None,
    names: Mapping[str, str] | None = None,
    vendor: VendorNames | None = None,
    window: TimeWindow | None = REPLAY_WINDOW,
) -> Iterator[Point]:
    """The points of a set of PM files (see the module docstring), in period order; a
    function whose LDN ``names`` holds (:func:`ldn_names`) is named by its inventory id, a
    measurement ``vendor`` names (:meth:`knowledge.pack.Pack.pm_names`) by its metric; a
    period ending outside ``window`` is quarantined."""
    q = quarantine if quarantine is not None else Quarantine()
    values: list[PmValue] = []
    for path in paths:
        values.extend(read_pm_file(path, q, window))
    values.sort(key=lambda v: (v.end, v.ldn, v.meas_type))
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float]] = {}
    for v in values:
        metric, labels, kind = metric_name(v.ldn, v.meas_type, vendor)
        entity = (names or {}).get(labels["instance"])
        if entity is not None:
            labels["ldn"], labels["instance"] = labels["instance"], entity
        key = tuple(sorted(labels.items()))
        if kind == "gauge":
            yield Point(v.end, metric, key, v.value, "gauge")
            continue
        last = totals.get((metric, key))
        if v.value is None:
            totals.pop((metric, key), None)  # the next count starts the sum again
            yield Point(v.end, metric, key, None, "counter")
            continue
        # the first period, or the first after a lost one, starts the sum: read as a reset
        lost = last is None or v.end - last[0] > 1.5 * v.duration
        total = v.value if last is None or lost else last[1] + v.value
        totals[(metric, key)] = (v.end, total)
        yield Point(v.end, metric, key, total, "counter")
