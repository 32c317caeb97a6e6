"""Console page latency with a large store: the index and incident pages over PostgreSQL.

Fills a schema of its own on the loopback PostgreSQL with N incidents (each with a diagnosis,
three findings and, for one in ten, a review), serves the console with uvicorn as `noc serve`
does (drafting on, template reports, no model) and times GET / (the triage list) and
GET /incidents/{id} from an HTTP client, sequentially, after a warm-up. The schema is dropped
afterwards.

Usage: .venv/bin/python bench/bench_console.py [--incidents 10000] [--requests 100]
       [--out bench/console_results.md]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import uvicorn
from _machine import cpu_name  # bench/ helper, found beside this script

from knowledge.pack import load_pack
from knowledge.topology import load_inventory
from noc_assistant.api.app import create_app
from noc_assistant.api.events import Broadcaster
from noc_assistant.models import Diagnosis, Evidence, Finding, Hypothesis, Incident, Review
from noc_assistant.store.postgres import PostgresStore
from noc_assistant.triage.drafting import Drafter

POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
ENTITIES = [f"{t}-{i}" for t in ("amf", "smf", "upf", "pcf") for i in range(1, 9)]
KPIS = ["amf-registration-success", "smf-pdu-session-success", "upf-n3-throughput"]
FAULTS = ["pfcp_association_loss", "n2_sctp_loss", "registration_storm", "upf_gtpu_drop"]


def fill(store: PostgresStore, n: int, rng: random.Random) -> list[str]:
    """``n`` incidents over the last 30 days, with diagnoses, findings and some reviews."""
    now = time.time()
    ids = []
    for k in range(n):
        t = now - rng.uniform(0, 30 * 86400)
        entity = rng.choice(ENTITIES)
        fs = [
            Finding(
                id=f"f-{k}-{j}",
                detector="ensemble:point",
                kpi=KPIS[j],
                entity=entity,
                ts=t + 60 * j,
                score=rng.uniform(1, 50),
                observed=rng.uniform(0.5, 0.9),
                expected_low=0.95,
                expected_high=1.0,
                direction="down",
            )
            for j in range(3)
        ]
        hyp = Hypothesis(
            fault=rng.choice(FAULTS), entity=entity, confidence=0.7, evidence_ids=(f"ev-{k}",)
        )
        resolved = k % 5 != 0
        inc = Incident(
            id=f"inc-b{k:06d}",
            fingerprint=f"b{k}",
            opened_at=t,
            updated_at=t + 600,
            entities=[entity],
            finding_ids=[f.id for f in fs],
            state="resolved" if resolved else "open",
            resolved_at=t + 900 if resolved else None,
            hypotheses=[hyp],
        )
        store.save_incident(inc)
        store.save_findings(fs, incident_id=inc.id)
        ev = Evidence(id=f"ev-{k}", finding_id=fs[0].id, entity=entity, kpi=KPIS[0], start=t, end=t)
        store.save_diagnosis(
            Diagnosis(incident_id=inc.id, verdict="fault", hypotheses=[hyp], evidence=[ev])
        )
        if k % 10 == 0:
            store.save_review(Review(incident_id=inc.id).judged("fault", "ana", at=t + 1200))
        ids.append(inc.id)
    return ids


def timed(client: httpx.Client, paths: list[str]) -> list[float]:
    out = []
    for path in paths:
        t0 = time.perf_counter()
        r = client.get(path)
        out.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, (path, r.status_code)
    return out


def pct(xs: list[float], q: float) -> float:
    """The nearest-rank percentile."""
    ranked = sorted(xs)
    return ranked[max(0, math.ceil(q / 100 * len(ranked)) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--incidents", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("console_results.md"))
    args = ap.parse_args()
    schema = f"noc_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    try:
        store = PostgresStore(f"{POSTGRES}?options=-csearch_path%3D{schema}")
        rng = random.Random(7)
        t0 = time.perf_counter()
        ids = fill(store, args.incidents, rng)
        fill_s = time.perf_counter() - t0
        pack = load_pack()
        topo = load_inventory(pack.fixture_path("inventory.yaml"), pack)
        drafter = Drafter(pack, topo)  # template reports: no model
        app = create_app(store, Broadcaster(), drafter=drafter)
        server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            timed(client, ["/", f"/incidents/{ids[0]}"] * 3)  # warm-up
            index = timed(client, ["/"] * args.requests)
            pages = timed(client, [f"/incidents/{rng.choice(ids)}" for _ in range(args.requests)])
            filtered = timed(client, ["/?state=open&entity=upf-*"] * args.requests)
        server.should_exit = True
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]
    rows = [("GET / (triage list)", index), ("GET /?state=open&entity=upf-*", filtered)]
    rows.append(("GET /incidents/{id}", pages))
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Console page latency over PostgreSQL",
        "",
        f"- command: `.venv/bin/python bench/bench_console.py --incidents {args.incidents} "
        f"--requests {args.requests}`",
        f"- machine: {cpu_name()}, Python {platform.python_version()}, PostgreSQL on loopback",
        f"- date: {now}",
        f"- store: {args.incidents:,} incidents (each with a diagnosis and 3 findings; 1 in 10 "
        f"judged), filled in {fill_s:.0f} s; the index lists the newest 500; requests sequential "
        "from one client after a warm-up; target p95 ≤ 300 ms",
        f"- 1-min load average at the end: {os.getloadavg()[0]:.2f} (other jobs share the machine)",
        "",
        "| page | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|",
    ]
    for name, xs in rows:
        lines.append(f"| {name} | {pct(xs, 50):.0f} | {pct(xs, 95):.0f} | {max(xs):.0f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
