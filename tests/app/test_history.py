"""Seen before: the earlier incidents like one incident (same entity and KPI, or the same
cause), with the NOC's verdict on each, through the store, the API, the incident page and
``noc incident similar``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_reviews import _client

from noc_assistant.cli import run
from noc_assistant.models import Hypothesis, Incident, Review
from noc_assistant.store import SqliteStore, Store
from noc_assistant.triage.history import LOOKBACK_S, similar_in_store

DAY = 86_400.0
NOW = 1_795_910_400.0  # 2026-11-29 00:00 UTC


def _inc(
    i: str, days_ago: float, entities: list[str], kpis: list[str], top: tuple[str, str] | None
) -> Incident:
    t = NOW - days_ago * DAY
    hyps = [Hypothesis(fault=top[0], entity=top[1], confidence=0.8)] if top else []
    return Incident(
        id=i,
        fingerprint=i,
        opened_at=t,
        updated_at=t + 60,
        state="resolved" if days_ago else "open",
        resolved_at=t + 900 if days_ago else None,
        entities=entities,
        kpis=kpis,
        title=f"{kpis[0]} on {entities[0]}",
        hypotheses=hyps,
    )


def _judged(i: str, verdict: str, by: str, cause: tuple[str, str] | None = None) -> Review:
    fault, entity = cause or (None, None)
    return Review(incident_id=i).judged(
        verdict,  # type: ignore[arg-type]
        by,
        NOW - DAY,
        fault=fault,
        entity=entity,
    )


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = SqliteStore(tmp_path / "noc.db")
    drop = ["upf-rx-drop"]
    gtpu = ("upf_gtpu_drop", "upf-2")
    for inc in (
        _inc("inc-now", 0, ["upf-2"], drop, gtpu),
        # the same alert three times before: twice a false alarm, once the real thing
        _inc("inc-a", 3, ["upf-2", "smf-1"], drop, None),
        _inc("inc-b", 10, ["upf-2"], ["upf-rx-drop", "upf-rx-throughput"], gtpu),
        _inc("inc-c", 40, ["upf-2"], drop, None),
        # the same cause, seen on another KPI
        _inc("inc-d", 20, ["upf-2"], ["upf-n3-loss"], gtpu),
        # not like it: another entity; the same entity on another KPI and cause
        _inc("inc-e", 5, ["upf-3"], drop, ("upf_gtpu_drop", "upf-3")),
        _inc("inc-f", 6, ["upf-2"], ["upf-sessions"], ("pfcp_association_loss", "upf-2")),
        # too old, and later than the incident
        _inc("inc-old", 100, ["upf-2"], drop, gtpu),
        _inc("inc-later", -1, ["upf-2"], drop, gtpu),
    ):
        s.save_incident(inc)
    s.save_review(_judged("inc-a", "no_fault", "ana"))
    s.save_review(_judged("inc-b", "fault", "bo", gtpu))
    s.save_review(_judged("inc-c", "no_fault", "ana"))
    # another KPI and top hypothesis, but the NOC confirmed this cause for it
    s.save_review(_judged("inc-f", "fault", "cy", gtpu))
    yield s
    s.close()


def test_earlier_incidents_like_this_one_with_their_verdicts(store: Store) -> None:
    inc = store.get_incident("inc-now")
    assert inc is not None
    seen = similar_in_store(store, inc)
    assert [p.id for p in seen.similar] == ["inc-a", "inc-f", "inc-b", "inc-d", "inc-c"]
    match = {p.id: p.match for p in seen.similar}
    assert match == {
        "inc-a": ["same_alert"],
        "inc-f": ["same_cause"],
        "inc-b": ["same_alert", "same_cause"],
        "inc-d": ["same_cause"],
        "inc-c": ["same_alert"],
    }
    assert (seen.total, seen.judged, seen.false_alarms) == (5, 4, 2)
    assert seen.confirmed == {"upf_gtpu_drop on upf-2": 2}
    assert seen.hint == (
        "Seen 5 times in the last 90 days: judged a false alarm 2 of 4 times;"
        " confirmed upf_gtpu_drop on upf-2 2 times."
    )
    b = next(p for p in seen.similar if p.id == "inc-b")
    assert (b.verdict, b.verdict_by, b.confirmed) == ("fault", "bo", "upf_gtpu_drop on upf-2")
    # a shorter look back
    week = similar_in_store(store, inc, lookback_s=7 * DAY)
    assert [p.id for p in week.similar] == ["inc-a", "inc-f"]
    assert LOOKBACK_S == 90 * DAY


def test_nothing_like_it() -> None:
    from noc_assistant.triage.history import similar

    inc = _inc("inc-x", 0, ["amf-1"], ["amf-registration-success"], None)
    other = _inc("inc-y", 1, ["amf-2"], ["amf-registration-success"], None)
    seen = similar(inc, [other], {})
    assert (seen.total, seen.similar, seen.hint) == (0, [], "")


def test_reviews_for_reads_many_ids_in_chunks(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "many.db")
    ids = [f"inc-{i:04d}" for i in range(1_203)]
    for i in ids[::2]:
        s.save_review(_judged(i, "no_fault", "ana"))
    got = s.reviews_for([*ids, ids[0]])
    assert sorted(got) == ids[::2] and got[ids[0]].verdict == "no_fault"
    s.close()


def test_the_console_shows_what_was_seen_before(store: Store) -> None:
    c = _client(store)
    r = c.get("/api/incidents/inc-now/similar")
    assert r.status_code == 200
    body = r.json()
    assert body["total"] == 5 and body["false_alarms"] == 2
    assert [p["id"] for p in c.get("/api/incidents/inc-now/similar?days=4").json()["similar"]] == [
        "inc-a"
    ]
    assert c.get("/api/incidents/inc-now/similar?days=0").status_code == 422
    assert c.get("/api/incidents/inc-nope/similar").status_code == 404
    page = c.get("/incidents/inc-now").text
    assert "Seen before" in page and "judged a false alarm 2 of 4 times" in page
    assert 'href="/incidents/inc-b"' in page and "upf_gtpu_drop on upf-2 (bo)" in page
    first = c.get("/incidents/inc-old").text  # the oldest: nothing before it
    assert "Nothing like it in the last 90 days." in first


def test_the_cli_lists_what_was_seen_before(
    store: Store,
    use_store: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    use_store(store, NOC_DATA_DIR=str(tmp_path))  # no inventory: no topology neighbours
    assert run(["incident", "similar", "inc-now"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Seen 5 times in the last 90 days")
    assert "inc-b  [same_alert, same_cause]  upf_gtpu_drop on upf-2  → fault" in out
    assert "inc-a  [same_alert]  -  → no fault (ana)" in out
    # still open: the incident on its entity a day later is at the same time
    beside = out.split("At the same time:\n", 1)[1].strip().splitlines()
    assert len(beside) == 1 and "inc-later  [same_entity]" in beside[0]
    assert run(["incident", "similar", "inc-now", "--days", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in data["seen_before"]["similar"]] == ["inc-a"]
    assert [p["id"] for p in data["concurrent"]] == ["inc-later"]
    assert run(["incident", "similar", "inc-nope"]) == 2
    assert "no incident 'inc-nope'" in capsys.readouterr().err


def test_the_triage_chat_answers_has_it_happened_before(store: Store) -> None:
    """Asked whether it happened before, the chat gives the NOC's record of earlier incidents
    like it, cited as ``[ev-seen]``; the counts are grounded in that record, and a count the
    record does not hold is not."""
    from test_drafting import PACK, case

    from guardrails.grounding import check_grounding
    from knowledge.topology import load_inventory
    from noc_assistant.triage.drafting import SEEN_ID, Drafter

    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    d = Drafter(PACK, topo)
    inc, diagnosis, _ = case("upf-gtpu-drop", 0, topo)
    now = store.get_incident("inc-now")
    assert now is not None
    seen = similar_in_store(store, now)
    a = d.answer(inc, diagnosis, "Has this happened before?", seen=seen)
    assert f"Seen before: {seen.hint} [{SEEN_ID}]" in a.text and SEEN_ID in a.cited
    assert "Seen before" not in d.answer(inc, diagnosis, "What failed?", seen=seen).text
    none = similar_in_store(store, _inc("inc-x", 0, ["amf-9"], ["amf-registration-success"], None))
    quiet = d.answer(inc, diagnosis, "Did it happen before?", seen=none)
    assert "No earlier incident like this one in the last 90 days." in quiet.text
    pool = d._grounding_pool(diagnosis, seen)
    good = f"It paged 5 times in 90 days and was judged a false alarm 2 of 4 times [{SEEN_ID}]."
    assert check_grounding(good, pool, PACK.references, PACK.grounding).ok
    bad = f"It paged 7 times in 90 days [{SEEN_ID}]."
    assert not check_grounding(bad, pool, PACK.references, PACK.grounding).ok


def test_the_report_closes_with_what_was_seen_before(store: Store) -> None:
    from test_drafting import PACK, case

    from knowledge.topology import load_inventory
    from noc_assistant.triage.drafting import Drafter

    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    d = Drafter(PACK, topo)
    inc, diagnosis, _ = case("upf-gtpu-drop", 0, topo)
    now = store.get_incident("inc-now")
    assert now is not None
    body = d.report(inc, diagnosis, seen=similar_in_store(store, now)).body
    section = body.split("## Seen before\n\n", 1)[1].split("\n## ", 1)[0]
    lines = section.strip().splitlines()
    assert lines[0].startswith("Seen 5 times in the last 90 days") and "[ev-seen]" in lines[0]
    assert lines[1:] == [
        "- 2026-11-26 00:00 UTC `inc-a`: no hypothesis; no fault",
        "- 2026-11-23 00:00 UTC `inc-f`: pfcp_association_loss on upf-2; fault: "
        "upf_gtpu_drop on upf-2",
        "- 2026-11-19 00:00 UTC `inc-b`: upf_gtpu_drop on upf-2; fault: upf_gtpu_drop on upf-2",
        "- 2026-11-09 00:00 UTC `inc-d`: upf_gtpu_drop on upf-2; not judged",
        "- 2026-10-20 00:00 UTC `inc-c`: no hypothesis; no fault",
    ]
    assert "## Seen before" not in d.report(inc, diagnosis).body


def test_the_handover_says_what_each_open_incident_was_before(store: Store) -> None:
    from noc_assistant.triage.handover import handover, render

    data = handover(store, NOW - 8 * 3600, NOW + 3600)
    (row,) = data["open"]
    assert row["id"] == "inc-now" and row["seen_before"].startswith("Seen 5 times")
    text = render(data)
    line = next(t for t in text.splitlines() if "`inc-now`" in t)
    assert line.endswith(
        "judged a false alarm 2 of 4 times; confirmed upf_gtpu_drop on upf-2 2 times."
    )


def test_the_console_shows_the_incidents_at_the_same_time(tmp_path: Path) -> None:
    """Two bus workers each paged for their own entities of one PFCP fault: on smf-01's page
    the UPF's incident (a topology neighbour) is listed as at the same time; an incident on an
    unrelated entity, or on a neighbour an hour later, is not."""
    s = SqliteStore(tmp_path / "beside.db")
    t = NOW
    for i, opened, entity, kpi in (
        ("inc-smf", t, "smf-01", "smf-pfcp-peers"),
        ("inc-upf", t + 120, "upf-01", "upf-pfcp-peers"),
        ("inc-smf-again", t + 300, "smf-01", "smf-pdu-session-success"),
        ("inc-gpu", t + 60, "gpu-srv-01", "gpu-kv-cache-usage"),
        ("inc-later", t + 3 * 3600, "upf-02", "upf-pfcp-peers"),
    ):
        inc = _inc(i, 0, [entity], [kpi], None).model_copy(
            update={
                "opened_at": opened,
                "updated_at": opened + 300,
                "state": "resolved",
                "resolved_at": opened + 900,
            }
        )
        s.save_incident(inc)
    s.save_review(_judged("inc-upf", "fault", "ana", ("pfcp_association_loss", "upf-01")))
    c = _client(s)
    got = c.get("/api/incidents/inc-smf/concurrent").json()
    assert [(p["id"], p["match"]) for p in got] == [
        ("inc-upf", ["neighbour"]),
        ("inc-smf-again", ["same_entity"]),
    ]
    assert got[0]["confirmed"] == "pfcp_association_loss on upf-01"
    page = c.get("/incidents/inc-smf").text
    assert "At the same time" in page and 'href="/incidents/inc-upf"' in page
    assert 'href="/incidents/inc-gpu"' not in page and "inc-later" not in page
    assert "At the same time" not in c.get("/incidents/inc-later").text
    assert c.get("/api/incidents/inc-nope/concurrent").status_code == 404
    s.close()


def test_the_report_lists_the_incidents_at_the_same_time() -> None:
    from test_drafting import PACK, case

    from knowledge.topology import load_inventory
    from noc_assistant.triage.drafting import Drafter
    from noc_assistant.triage.history import concurrent

    topo = load_inventory(PACK.fixture_path("inventory.yaml"), PACK)
    d = Drafter(PACK, topo)
    inc, diagnosis, _ = case("upf-gtpu-drop", 0, topo)  # on upf-01
    smf = _inc("inc-smf", 0, ["smf-01"], ["smf-pfcp-peers"], ("pfcp_association_loss", "upf-01"))
    smf = smf.model_copy(update={"opened_at": inc.opened_at + 60, "updated_at": inc.opened_at + 90})
    beside = concurrent(inc, [smf], topo.neighbours)
    body = d.report(inc, diagnosis, beside=beside).body
    section = body.split("## At the same time\n\n", 1)[1].split("\n## ", 1)[0].strip()
    assert section.endswith(
        "`inc-smf` on smf-01 (a neighbour, open): pfcp_association_loss on upf-01; not judged"
    )
    assert "## At the same time" not in d.report(inc, diagnosis).body


def test_the_stores_candidate_filter_loses_nothing(tmp_path: Path) -> None:
    """The database filter (incidents mentioning an entity, or a fault and its entity; reviews
    confirming that cause) gives what a scan of every earlier incident gives."""
    import random

    from noc_assistant.triage.history import concurrent, concurrent_in_store, similar

    rng = random.Random(3)
    store = SqliteStore(tmp_path / "noc.db")
    entities = [f"{t}-{i}" for t in ("amf", "smf", "upf") for i in range(1, 5)]
    faults = ["pfcp_association_loss", "n2_sctp_loss", "upf_gtpu_drop"]
    everything = []
    for k in range(400):
        entity, t = rng.choice(entities), 1_764_000_000.0 + 900.0 * k
        hyp = Hypothesis(fault=rng.choice(faults), entity=rng.choice(entities), confidence=0.7)
        inc = Incident(
            id=f"inc-{k:04d}",
            fingerprint=str(k),
            opened_at=t,
            updated_at=t + 600,
            entities=[entity],
            kpis=[rng.choice(["k-a", "k-b"])],
            hypotheses=[hyp],
        )
        store.save_incident(inc)
        everything.append(inc)
        if k % 7 == 0:  # a review that confirms another cause than the incident's own top
            cause = (rng.choice(entities), rng.choice(faults))
            review = Review(incident_id=inc.id).judged(
                "fault", "ana", at=t + 700, fault=cause[1], entity=cause[0]
            )
            store.save_review(review)
    reviews = store.reviews()
    links = {"smf-1": {"upf-1", "upf-2"}, "upf-1": {"smf-1"}}

    def near(e: str) -> set[str]:
        return links.get(e, set())

    for inc in everything[-40:]:
        full = similar(inc, everything, reviews)
        assert similar_in_store(store, inc) == full
        scan = concurrent(inc, everything, near, reviews, now=inc.updated_at)
        assert concurrent_in_store(store, inc, near, now=inc.updated_at) == [
            p for p in scan if p.opened_at >= inc.opened_at - 86_400.0
        ]
