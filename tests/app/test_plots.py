"""The incident page draws each KPI's findings with their expected band (server-side SVG)."""

from __future__ import annotations

import re

import httpx

from noc_assistant.api.events import Broadcaster
from noc_assistant.models import Finding, Incident, Maintenance
from noc_assistant.store import Store


def _finding(i: int, entity: str, kpi: str, observed: float, **kw: object) -> Finding:
    return Finding(
        id=f"f-{entity}-{i}",
        detector="ensemble:point",
        kpi=kpi,
        entity=entity,
        ts=1_764_000_000.0 + 300 * i,
        score=2.0 + i,
        observed=observed,
        expected_low=0.97,
        expected_high=1.3,  # above 100 %: clipped to the ratio's bound on the chart
        direction="down",
        **kw,  # type: ignore[arg-type]
    )


def test_the_incident_page_plots_each_kpi_with_band_span_and_maintenance(
    served: tuple[str, Store, Broadcaster],
) -> None:
    url, store, _ = served
    hostile = "amf-1<script>alert(1)</script>"
    kpi = "amf-registration-success"
    findings = [_finding(i, hostile, kpi, 0.8 - 0.01 * i) for i in range(3)]
    findings.append(_finding(3, hostile, kpi, 0.9, evidence_only=True))
    findings.append(_finding(0, "smf-1", "smf-session-success", 0.5))
    inc = Incident(
        id="inc-plot",
        fingerprint="x",
        opened_at=findings[0].ts,
        updated_at=findings[3].ts,
        entities=[hostile, "smf-1"],
        finding_ids=[f.id for f in findings],
    )
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    store.save_maintenance(
        Maintenance(
            id="mw-1",
            entity="smf-1",
            start=inc.opened_at - 600,
            end=inc.opened_at + 300,
            by="ana",
            created_at=inc.opened_at,
        )
    )
    r = httpx.get(f"{url}/incidents/inc-plot", timeout=30)
    assert r.status_code == 200
    svgs = re.findall(r"<svg .*?</svg>", r.text, flags=re.S)
    assert len(svgs) == 2  # one per (entity, KPI)
    amf, smf = svgs  # strongest findings first
    assert amf.count("<circle") == 4 and amf.count('fill="#9ca3af"') == 1  # one evidence-only
    assert "<polygon" in amf and ">100 %</text>" in amf and "130 %" not in amf
    assert "<script>" not in r.text.split("<h3>What the detectors saw</h3>")[1].split("<h3>")[0]
    assert "maintenance" in smf and "maintenance" not in amf
    assert " style=" not in "".join(svgs)  # the CSP allows no inline style


def test_the_list_has_sparklines_and_the_page_draws_the_topology(
    served_with_drafting: tuple[str, Store, Broadcaster],
) -> None:
    from knowledge.pack import load_pack
    from knowledge.topology import load_inventory
    from noc_assistant.models import Diagnosis, Hypothesis

    url, store, _ = served_with_drafting
    pack = load_pack()
    topo = load_inventory(pack.fixture_path("inventory.yaml"), pack)
    smf = topo.entities_of_type("smf")[0]
    upf = sorted(topo.neighbours(smf))[0]
    findings = [_finding(i, smf, "smf-pdu-session-success", 0.5) for i in range(3)]
    inc = Incident(
        id="inc-topo",
        fingerprint="t",
        opened_at=findings[0].ts,
        updated_at=findings[-1].ts,
        entities=[smf],
        finding_ids=[f.id for f in findings],
    )
    store.save_incident(inc)
    store.save_findings(findings, incident_id=inc.id)
    hyp = Hypothesis(fault="pfcp_association_loss", entity=upf, confidence=0.8)
    store.save_diagnosis(Diagnosis(incident_id=inc.id, verdict="fault", hypotheses=[hyp]))
    index = httpx.get(url, timeout=30).text
    row = index.split('href="/incidents/inc-topo"')[1].split("</tr>")[0]
    assert 'class="spark"' in row and "3 finding(s)" in row
    page = httpx.get(f"{url}/incidents/inc-topo", timeout=30).text
    drawing = page.split('class="topology"')[1].split("</svg>")[0]
    assert f">{smf}</text>" in drawing and f">{upf}</text>" in drawing
    assert 'stroke-width="2.5"' in drawing  # the ranked root cause is ringed
