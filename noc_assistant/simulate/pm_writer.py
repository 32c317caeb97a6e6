"""3GPP PM files (TS 32.435 ``measCollecFile``) of a simulated scenario: ``noc simulate
--pm-out DIR``.

Beside its replay file the simulator can write what an OSS would collect from the same network
functions: for every network function whose series have 3GPP measurements (the AMFs, SMFs,
UPFs and the PCF; not the EPC's, see below) and every granularity period (the scenario's
interval, whole seconds, at least :data:`MIN_PERIOD_S`) one file named as TS 32.432 names them,
``A20261129.1200+0000-1205+0000_amf-1.xml``, holding one ``measInfo`` for the function's object
``ManagedElement=amf-1,AMFFunction=1`` (:func:`function_ldn`), and for a UPF a second one for
its N3 endpoint (``…,UPFFunction=1,EP_N3=1``). The period of a file is the
interval that ends at a sample's stamp (a sample reports the interval that ends there), and it
holds:

- for a counter, the **count** of the period: the counter's increase from the sample before
  (after a process restart, the value since the restart);
- for a gauge, the sample's value (the simulator's gauges are the period's means already);
- ``NIL`` where the sample is missing (a gap, a maintenance silence) and, for a count, where the
  sample before it is (the first period of the scenario included): nothing missing is written
  as zero.

The measurement types are those :func:`noc_assistant.ingest.pm.metric_name` reads back as the
simulator's metric names (``RM.RegInitFail.22`` on ``AMFFunction`` →
``fivegs_amffunction_rm_reginitfail{cause="22"}``): TS 28.552's names where it defines the
measurement, and for the status gauges their mean over the period (``RM.RegisteredSubNbrMean``,
``SM.SessionNbrMean``; the simulator's gauges are period means, and the reader takes a mean
under the exporter's gauge name) or a vendor-specific name in the same style
(``UPF.SessionNbrMean``, ``PA.SessionNbrMean``). The network functions' own gauges and counters
(Open5GS' ``gnb``, ``pfcp_peers_active``, the MME's ``enb``, the HSS's ``s6a_rx_air`` …) are
written under the vendor-specific (``VS.``) names of the knowledge pack's
``measurements/*.yaml`` (``VS.GnbNbrMean``, ``VS.S6aRxAir``), which ``noc pm convert`` reads back
with the same pack. PLMN, S-NSSAI and cause become sub-counter suffixes, in that order
(``.PLMN99970``, ``.1-000001``, ``.22``): the AMF's registrations and registered subscribers
are split per PLMN, as vendor AMFs split them, so that a roaming partner's share can be read
from PM data too. The UPF's N3 interface counters (``node_network_*_total{device="n3"}``: the
simulated N3 carries GTP-U only) are written as TS 28.552's N3 measurements on ``EP_N3``
(:data:`N3_MEAS_TYPES`: received packets ``GTP.InDataPktN3UPF``, lost ones
``GTP.InDataPktPacketLossN3UPF``, octets ``GTP.InDataOctN3UPF`` / ``GTP.OutDataOctN3UPF``), which
read back as ``fivegs_ep_n3_gtp_*``, the names the pack's N3 KPIs read: the only series not
read back under the simulator's own name.

Left out of the PM files, since no measurement is read back under their names:

- ``gtp_node_s5c_rx_createsession`` (SMF, per S8 peer address): a sub-counter cannot carry an
  IP address (its dots separate sub-counters);
- ``free5gc_sbi_outbound_request_duration_seconds`` (AMF, SMF): a histogram (the request
  counts, ``free5gc_sbi_outbound_request_total``, are written: ``VS.SbiClientReq`` with the
  target service, method and status as sub-counters, as the pack names them);
- ``process_start_time_seconds``: a process metric (its changes mark the restarts counted
  from);
- GPU servers (``vllm:*``, ``sglang:*``, ``DCGM_FI_*``) are not network functions: no files.

>>> from noc_assistant.simulate import ScenarioConfig, build_scenario
>>> config = ScenarioConfig(days=0.01, faults="none", seed=3, interval_s=300, core="converged")
>>> plan = pm_plan(build_scenario(config))
>>> sorted({m.entity for m in plan})
['amf-1', 'amf-2', 'hss-1', 'mme-1', 'mme-2', 'pcf-1', 'smf-1', 'smf-2', 'upf-1', 'upf-2', \
'upf-3']
>>> [(m.meas_type, m.kind) for m in plan if m.entity == "amf-1"][:4]
[('VS.GnbNbrMean', 'gauge'), ('VS.RanUeNbrMean', 'gauge'), ('VS.AmfSessionNbrMean', 'gauge'), \
('RM.RegInitReq.PLMN99970', 'counter')]
>>> pm_file_name(1795953600.0, 1795953900.0, "amf-1")
'A20261129.1200+0000-1205+0000_amf-1.xml'
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from noc_assistant.errors import ConfigError
from noc_assistant.ingest.pm import FUNCTION_CLASSES, VendorNames
from noc_assistant.simulate import Scenario, ScenarioConfig

__all__ = [
    "FUNCTION_CLASSES",
    "MEAS_TYPES",
    "MIN_PERIOD_S",
    "N3_MEAS_TYPES",
    "PmMeasurement",
    "check_pm_config",
    "function_ldn",
    "pm_file_name",
    "pm_plan",
    "write_pm_files",
    "writer_names",
]

#: the shortest granularity period written (TS 32.401's shortest is 5 min; 1 min for tests)
MIN_PERIOD_S = 60.0
NAMESPACE = "http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec"
FILE_FORMAT_VERSION = "32.435 V16.0"
VENDOR = "noc-assistant simulator"

#: simulator metric → measurement type (without sub-counter); the function class is the one
#: the metric's ``fivegs_<class>_`` prefix names
MEAS_TYPES: Mapping[str, str] = {
    "fivegs_amffunction_rm_reginitreq": "RM.RegInitReq",
    "fivegs_amffunction_rm_reginitsucc": "RM.RegInitSucc",
    "fivegs_amffunction_rm_reginitfail": "RM.RegInitFail",
    "fivegs_amffunction_rm_regmobreq": "RM.RegMobReq",
    "fivegs_amffunction_rm_regmobsucc": "RM.RegMobSucc",
    "fivegs_amffunction_mm_paging5greq": "MM.Paging5GReq",
    "fivegs_amffunction_mm_paging5gsucc": "MM.Paging5GSucc",
    "fivegs_amffunction_amf_authreq": "AMF.AuthReq",
    "fivegs_amffunction_amf_authfail": "AMF.AuthFail",
    "fivegs_amffunction_rm_registeredsubnbr": "RM.RegisteredSubNbrMean",
    "fivegs_smffunction_sm_pdusessioncreationreq": "SM.PduSessionCreationReq",
    "fivegs_smffunction_sm_pdusessioncreationsucc": "SM.PduSessionCreationSucc",
    "fivegs_smffunction_sm_pdusessioncreationfail": "SM.PduSessionCreationFail",
    "fivegs_smffunction_sm_n4sessionestabreq": "SM.N4SessionEstabReq",
    "fivegs_smffunction_sm_n4sessionestabfail": "SM.N4SessionEstabFail",
    "fivegs_smffunction_sm_sessionnbr": "SM.SessionNbrMean",
    "fivegs_upffunction_sm_n4sessionestabreq": "SM.N4SessionEstabReq",
    "fivegs_upffunction_upf_sessionnbr": "UPF.SessionNbrMean",
    "fivegs_pcffunction_pa_policyamassoreq": "PA.PolicyAMAssoReq",
    "fivegs_pcffunction_pa_policyamassosucc": "PA.PolicyAMAssoSucc",
    "fivegs_pcffunction_pa_policysmassoreq": "PA.PolicySMAssoReq",
    "fivegs_pcffunction_pa_policysmassosucc": "PA.PolicySMAssoSucc",
    "fivegs_pcffunction_pa_sessionnbr": "PA.SessionNbrMean",
}

#: the UPF's N3 interface counter (``device="n3"``) → TS 28.552 measurement on its ``EP_N3``
N3_MEAS_TYPES: Mapping[str, str] = {
    "node_network_receive_packets_total": "GTP.InDataPktN3UPF",
    "node_network_receive_drop_total": "GTP.InDataPktPacketLossN3UPF",
    "node_network_receive_bytes_total": "GTP.InDataOctN3UPF",
    "node_network_transmit_bytes_total": "GTP.OutDataOctN3UPF",
}
N3_OBJECT = "EP_N3=1"

#: labels written as sub-counter suffixes, in this order, and how
_SUB_COUNTERS: tuple[tuple[str, str], ...] = (
    ("plmnid", "PLMN{}"),
    ("snssai", "{}"),
    ("cause", "{}"),
)
#: labels that name the measured object (the LDN says them)
_IDENTITY = ("instance", "nf")

Arr = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PmMeasurement:
    """One measurement type of one network function: the simulator series (``rows``, indices
    into ``Scenario.series``) it sums, and whether it is a count or a gauge."""

    entity: str
    ldn: str
    meas_type: str
    kind: Literal["counter", "gauge"]
    rows: tuple[int, ...]


def function_ldn(entity: str, entity_type: str) -> str:
    """The LDN of a network function's managed function object, which
    :func:`noc_assistant.ingest.pm.metric_name` reads back as the ``instance``.

    >>> function_ldn("smf-2", "smf")
    'ManagedElement=smf-2,SMFFunction=1'
    """
    cls = FUNCTION_CLASSES.get(entity_type)
    if cls is None:
        raise ValueError(f"{entity}: {entity_type!r} is not a network function type")
    return f"ManagedElement={entity},{cls}=1"


def check_pm_config(config: ScenarioConfig) -> None:
    """Raise :class:`ConfigError` unless ``config`` can be written as PM files: periods of
    whole seconds, at least :data:`MIN_PERIOD_S`, on the tick (no scrape phases)."""
    interval = float(config.interval_s)
    if interval < MIN_PERIOD_S:
        raise ConfigError(
            f"PM files need a granularity period of at least {MIN_PERIOD_S:g} s "
            f"(typically 300 or 900); the interval is {interval:g} s"
        )
    if not interval.is_integer():
        raise ConfigError(
            f"PM files need a granularity period of whole seconds; the interval is {interval:g} s"
        )
    if config.scrape_phases:
        raise ConfigError(
            "PM periods end on the granularity boundaries; scrape phases stamp each entity "
            "off them (drop --scrape-phases to write PM files)"
        )


def _entity_types(scenario: Scenario) -> dict[str, str]:
    return {e.id: e.type for e in scenario.network.entities}


WriterNames = Mapping[tuple[str, str], tuple[str, tuple[str, ...]]]
"""(NF type, metric) → (vendor-specific measurement, the labels its sub-counters carry)."""


def writer_names(
    names: VendorNames | None = None,
) -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
    """The pack's measurement names (:meth:`knowledge.pack.Pack.pm_names`; default: the default
    pack's) turned round for writing: (NF type, metric) → (measurement, sub-counter labels)."""
    if names is None:
        from knowledge.pack import load_pack

        names = load_pack().pm_names()
    return {(nf, metric): (meas, subs) for (nf, meas), (metric, subs) in names.items()}


def pm_plan(scenario: Scenario, vendor: WriterNames | None = None) -> list[PmMeasurement]:
    """The measurements of the PM files of ``scenario``, network function by network function
    (in the order of its series). ``vendor`` names the metrics written as vendor-specific
    measurements (:func:`writer_names`; default: the default pack's ``measurements``)."""
    vs = writer_names() if vendor is None else vendor
    types = _entity_types(scenario)
    groups: dict[tuple[str, str, str], list[int]] = {}
    kinds: dict[tuple[str, str, str], Literal["counter", "gauge"]] = {}
    for i, s in enumerate(scenario.series):
        nf_type = types.get(s.entity, "")
        if nf_type not in FUNCTION_CLASSES or s.type not in ("counter", "gauge"):
            continue
        ldn = function_ldn(s.entity, nf_type)
        labels = dict(s.labels)
        base = MEAS_TYPES.get(s.metric)
        forms = _SUB_COUNTERS
        if base is None and (nf_type, s.metric) in vs:
            meas, declared = vs[(nf_type, s.metric)]
            base = meas + ("Mean" if s.type == "gauge" else "")
            forms = tuple((k, "{}") for k in declared) or _SUB_COUNTERS
            if declared and not set(declared) <= set(labels):
                continue
        if base is None and nf_type == "upf" and labels.pop("device", None) == "n3":
            base = N3_MEAS_TYPES.get(s.metric)
            ldn = f"{ldn},{N3_OBJECT}"
        if base is None:
            continue
        extra = set(labels) - set(_IDENTITY) - {k for k, _ in forms}
        if extra:  # a dimension no sub-counter carries: not written
            continue
        subs = [form.format(labels[k]) for k, form in forms if k in labels]
        key = (s.entity, ldn, ".".join([base, *subs]))
        groups.setdefault(key, []).append(i)
        kinds[key] = "counter" if s.type == "counter" else "gauge"
    return [
        PmMeasurement(ent, ldn, meas, kinds[(ent, ldn, meas)], tuple(rows))
        for (ent, ldn, meas), rows in groups.items()
    ]


def _stamp(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def pm_file_name(begin: float, end: float, managed_element: str) -> str:
    """TS 32.432 name of a single-NE, single-period file (``A<date>.<begin>-<end>_<NE>.xml``,
    UTC)."""
    b, e = _stamp(begin), _stamp(end)
    return f"A{b:%Y%m%d}.{b:%H%M}+0000-{e:%H%M}+0000_{managed_element}.xml"


def _value_text(v: float) -> str:
    if math.isnan(v):
        return "NIL"
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def _document(
    entity: str,
    entity_type: str,
    begin: float,
    end: float,
    period_s: int,
    measurements: Sequence[PmMeasurement],
    values: Sequence[float],
) -> ET.ElementTree[ET.Element]:
    begin_text, end_text = _stamp(begin).isoformat(), _stamp(end).isoformat()
    element_dn = f"ManagedElement={entity}"
    # the default namespace as an attribute: ElementTree qualifies no attribute names
    root = ET.Element("measCollecFile", xmlns=NAMESPACE)
    header = _sub(root, "fileHeader", fileFormatVersion=FILE_FORMAT_VERSION, vendorName=VENDOR)
    _sub(header, "fileSender", localDn=element_dn, elementType=entity_type.upper())
    _sub(header, "measCollec", beginTime=begin_text)
    data = _sub(root, "measData")
    _sub(data, "managedElement", localDn=element_dn, userLabel=entity, swVersion=VENDOR)
    # one measInfo per measured object (the function, its N3 endpoint), in plan order
    objects: dict[str, list[tuple[PmMeasurement, float]]] = {}
    for m, v in zip(measurements, values, strict=True):
        objects.setdefault(m.ldn, []).append((m, v))
    for ldn, pairs in objects.items():
        rdn = ldn.rsplit(",", 1)[-1].split("=", 1)[0]
        info = _sub(data, "measInfo", measInfoId=rdn)
        _sub(info, "job", jobId=f"pm-{entity_type}-{period_s}s")
        _sub(info, "granPeriod", duration=f"PT{period_s}S", endTime=end_text)
        _sub(info, "repPeriod", duration=f"PT{period_s}S")
        for p, (m, _) in enumerate(pairs, start=1):
            _sub(info, "measType", m.meas_type, p=str(p))
        mv = _sub(info, "measValue", measObjLdn=ldn)
        for p, (_, v) in enumerate(pairs, start=1):
            _sub(mv, "r", _value_text(v), p=str(p))
    footer = _sub(root, "fileFooter")
    _sub(footer, "measCollec", endTime=end_text)
    ET.indent(root)
    return ET.ElementTree(root)


def _write(path: Path, doc: ET.ElementTree[ET.Element]) -> None:
    stylesheet = ET.ProcessingInstruction(
        "xml-stylesheet", 'type="text/xsl" href="MeasDataCollection.xsl"'
    )
    with path.open("wb") as fh:
        fh.write(b'<?xml version="1.0" encoding="UTF-8"?>\n')
        fh.write(ET.tostring(stylesheet) + b"\n")
        doc.write(fh, encoding="utf-8", xml_declaration=False)
        fh.write(b"\n")


def _counts(prev: Arr, cur: Arr, restarted: npt.NDArray[np.bool_]) -> Arr:
    """Per-series count of the period from two consecutive cumulative samples: NaN if either
    is missing, the value since the restart where the process restarted or the counter fell."""
    reset = restarted | (cur < prev)
    out = np.where(reset, cur, cur - prev)
    return np.asarray(np.where(np.isnan(prev) | np.isnan(cur), np.nan, out), dtype=np.float64)


def write_pm_files(scenario: Scenario, out_dir: Path | str) -> list[Path]:
    """Write the PM files of ``scenario`` into ``out_dir`` (see the module docstring); returns
    their paths, period by period. :class:`ConfigError` if the scenario's interval cannot be a
    granularity period (:func:`check_pm_config`)."""
    check_pm_config(scenario.config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    types = _entity_types(scenario)
    plan = pm_plan(scenario)
    by_entity: dict[str, list[PmMeasurement]] = {}
    for m in plan:
        by_entity.setdefault(m.entity, []).append(m)
    period = int(scenario.interval_s)
    counter_rows = sorted({i for m in plan if m.kind == "counter" for i in m.rows})
    # the restart marker of each counter row: its entity's process start time
    start_row = {
        s.entity: i
        for i, s in enumerate(scenario.series)
        if s.metric == "process_start_time_seconds"
    }
    marker = np.array([start_row.get(scenario.series[i].entity, -1) for i in counter_rows])
    rows = np.array(counter_rows, dtype=np.intp)
    n_series = len(scenario.series)
    prev = np.full(n_series, np.nan)
    paths: list[Path] = []
    for times, values, _ in scenario.iter_chunks():
        for j, end in enumerate(times.tolist()):
            cur = values[:, j]
            period_values = cur.copy()
            if counter_rows:
                p_start = np.where(marker >= 0, prev[np.maximum(marker, 0)], np.nan)
                c_start = np.where(marker >= 0, cur[np.maximum(marker, 0)], np.nan)
                restarted = ~np.isnan(p_start) & ~np.isnan(c_start) & (c_start != p_start)
                period_values[rows] = _counts(prev[rows], cur[rows], restarted)
            begin = end - scenario.interval_s
            for entity, measurements in by_entity.items():
                sums = [float(np.sum(period_values[list(m.rows)])) for m in measurements]
                doc = _document(entity, types[entity], begin, end, period, measurements, sums)
                path = out / pm_file_name(begin, end, entity)
                _write(path, doc)
                paths.append(path)
            prev = cur.copy()
    return paths
