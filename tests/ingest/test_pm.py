"""3GPP PM files: both encodings, both roots, NIL and suspect values, lost periods, and files
that are not PM files; ``noc pm convert`` writes a replay the pipeline reads."""

from __future__ import annotations

import json
from pathlib import Path

from noc_assistant.cli import run
from noc_assistant.ingest import Quarantine
from noc_assistant.ingest.pm import pm_points
from noc_assistant.ingest.reader import read_replay
from noc_assistant.stream.pipeline import Pipeline

_NS = {
    "32.435": "http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec",
    "28.550": "http://www.3gpp.org/ftp/specs/archive/28_series/28.550#measData",
}


def _pm(end: str, req: str, succ: str, sessions: str, *, variant: str = "32.435") -> str:
    """One 15-minute file: AMF counts in the measType/r encoding, SMF counts in the
    measTypes/measResults one (the second SMF suspect)."""
    ns = _NS[variant]
    amf = f"""<measInfo measInfoId="AMF-Registration">
      <granPeriod duration="PT900S" endTime="{end}"/>
      <measType p="1">RM.RegInitReq.1-000001</measType>
      <measType p="2">RM.RegInitSucc.1-000001</measType>
      <measType p="7">RM.RegInitFail.22</measType>
      <measType p="10">RM.RegisteredSubNbrMean.1-000001</measType>
      <measValue measObjLdn="ManagedElement=5gc-ams-01,AMFFunction=1">
        <r p="1">{req}</r><r p="2">{succ}</r><r p="7">17</r><r p="10">{sessions}</r>
      </measValue>
    </measInfo>
    <measInfo measInfoId="SMF-Session">
      <granPeriod duration="PT900S" endTime="{end}"/>
      <measTypes>SM.PduSessionCreationReq.1-000001 SM.PduSessionCreationSucc.1-000001</measTypes>
      <measValue measObjLdn="ManagedElement=5gc-ams-01,SMFFunction=1">
        <measResults>500 NIL</measResults>
      </measValue>
      <measValue measObjLdn="ManagedElement=5gc-ams-01,SMFFunction=2">
        <measResults>400 399</measResults>
        <suspect>true</suspect>
      </measValue>
    </measInfo>"""
    if variant == "28.550":
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<MeasDataFile xmlns="{ns}">
  <fileHeader><fileSender senderName="5gc-ams-01"/><MeasData beginTime="{end}"/></fileHeader>
  <MeasData><measuredEntity localDn="ManagedElement=5gc-ams-01"/>{amf}</MeasData>
  <fileFooter><MeasData endTime="{end}"/></fileFooter>
</MeasDataFile>
"""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<measCollecFile xmlns="{ns}">
  <fileHeader fileFormatVersion="32.435 V16.0" vendorName="ExampleVendor">
    <measCollec beginTime="{end}"/>
  </fileHeader>
  <measData>
    <managedElement localDn="ManagedElement=5gc-ams-01"/>
    {amf}
  </measData>
  <fileFooter><measCollec endTime="{end}"/></fileFooter>
</measCollecFile>
"""


def _drop(tmp_path: Path) -> list[Path]:
    files = {
        "A1400.xml": _pm("2026-03-12T14:15:00+01:00", "18432", "18190", "802133"),
        "A1415.xml": _pm("2026-03-12T14:30:00+01:00", "18000", "17900", "802500", variant="28.550"),
        # 14:30–14:45 was never delivered
        "A1445.xml": _pm("2026-03-12T15:00:00+01:00", "17000", "16990", "801000"),
        "broken.xml": "<measCollecFile><measData>\n<oops></measData>",
        "other.xml": '<?xml version="1.0"?><html><body/></html>',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return [tmp_path / name for name in files]


def test_pm_files_become_cumulative_counters_and_gauges(tmp_path: Path) -> None:
    q = Quarantine()
    points = list(pm_points(_drop(tmp_path), q))
    amf = ("instance", "ManagedElement=5gc-ams-01,AMFFunction=1")
    req = [p for p in points if p.metric == "fivegs_amffunction_rm_reginitreq"]
    assert next(p.labels for p in req) == (amf, ("nf", "amf"), ("snssai", "1-000001"))
    assert [p.type for p in req] == ["counter"] * 3
    # summed in period order; after the lost period the sum starts again (read as a reset)
    assert [p.value for p in req] == [18432.0, 36432.0, 17000.0]
    assert [p.ts for p in req] == [1773321300.0, 1773322200.0, 1773324000.0]
    fail = next(p for p in points if p.metric == "fivegs_amffunction_rm_reginitfail")
    assert dict(fail.labels)["cause"] == "22"
    mean = [p for p in points if p.metric == "fivegs_amffunction_rm_registeredsubnbr"]
    assert next((p.type, p.value) for p in mean) == ("gauge", 802133.0)
    # NIL is a gap, and so is a suspect value (quarantined with its reason)
    succ = [
        p
        for p in points
        if p.metric == "fivegs_smffunction_sm_pdusessioncreationsucc"
        and dict(p.labels)["instance"].endswith("SMFFunction=1")
    ]
    assert [p.value for p in succ] == [None, None, None]
    suspect = [p for p in points if dict(p.labels)["instance"].endswith("SMFFunction=2")]
    assert suspect and all(p.value is None for p in suspect)
    reasons = [(Path(r.source).name, r.line, r.reason) for r in q.records]
    assert ("broken.xml", 2) in [(n, line) for n, line, _ in reasons]  # where it broke
    assert any(n == "other.xml" and "not a 3GPP PM file" in why for n, _, why in reasons)
    assert sum("suspect" in why for _, _, why in reasons) == 2 * 3  # 2 values × 3 files


def test_an_inventory_names_the_functions_of_one_element(tmp_path: Path) -> None:
    """One element holds an AMF and two SMFs: the inventory's ``ldn`` keys name each function
    by its id (the LDN kept as a label); a function it does not know keeps its LDN."""
    inventory = tmp_path / "inventory.json"
    inventory.write_text(
        json.dumps(
            {
                "entities": [
                    {
                        "id": "amf-07",
                        "type": "amf",
                        "ldn": "ManagedElement=5gc-ams-01,AMFFunction=1",
                    },
                    {
                        "id": "smf-12",
                        "type": "smf",
                        "ldn": "ManagedElement=5gc-ams-01, SMFFunction=1",
                    },
                ]
            }
        )
    )
    drop = tmp_path / "drop"
    drop.mkdir()
    _drop(drop)
    out = tmp_path / "telemetry.jsonl"
    assert run(["pm", "convert", str(drop), "--out", str(out), "--inventory", str(inventory)]) == 0
    labels = [json.loads(line)["labels"] for line in out.read_text().splitlines()]
    names = {(d["instance"], d.get("ldn")) for d in labels}
    assert names == {
        ("amf-07", "ManagedElement=5gc-ams-01,AMFFunction=1"),
        ("smf-12", "ManagedElement=5gc-ams-01,SMFFunction=1"),
        ("ManagedElement=5gc-ams-01,SMFFunction=2", None),
    }
    bad = tmp_path / "bad.json"
    bad.write_text('{"entities": [{"id": "x"}]}')
    assert run(["pm", "convert", str(drop), "--out", str(out), "--inventory", str(bad)]) == 2


def test_pm_convert_writes_a_replay_file(tmp_path: Path) -> None:
    _drop(tmp_path)
    out = tmp_path / "out" / "telemetry.jsonl"
    out.parent.mkdir()
    assert run(["pm", "convert", str(tmp_path), "--out", str(out)]) == 0
    q = Quarantine()
    points = list(read_replay(out, q))
    assert q.count == 0 and len(points) == 3 * (4 + 4)  # per file: 4 AMF values, 4 SMF
    qfile = out.with_name(out.name + ".quarantine.jsonl")
    assert qfile.exists() and "broken.xml" in qfile.read_text()
    assert run(["pm", "convert", str(tmp_path / "missing.xml"), "--out", str(out)]) == 2


def test_the_packs_kpis_read_pm_data(tmp_path: Path) -> None:
    """Ten hours of 15-minute files through the pipeline: the registration success KPI
    (TS 28.554) comes out of the PM counts as it does out of Open5GS' exporter."""
    paths = []
    for i in range(40):
        minute = 15 * (i + 1)
        end = f"2026-03-12T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
        paths.append(tmp_path / f"A{i:02d}.xml")
        paths[-1].write_text(_pm(end, str(18000 + i), str(17910 + i), "800000"))
    pipe = Pipeline().replay(pm_points(paths))
    assert pipe.interval_s == 900.0
    entity = "ManagedElement=5gc-ams-01,AMFFunction=1"
    ratio = [v for _, v in pipe.kpi_history[("amf-registration-success", entity)]]
    assert len(ratio) >= 30
    assert all(abs(v - 17910 / 18000) < 1e-3 for v in ratio)
    assert pipe.entity_type(entity) == "amf" and pipe.findings == []
