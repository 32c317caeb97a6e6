"""An offline corpus of NOC-style prompts for drafter training and benchmarks.

Prompts are built from templates (incident summaries, partner-NOC e-mails, KPI questions,
alarm explanations) with seeded random network functions, KPIs, numbers and times; the target
model then answers them (see :mod:`noc_assistant.serving.train`). Different seeds give disjoint
prompt sets for training and evaluation.

>>> p = noc_prompts(3, seed=1)
>>> len(p), all(isinstance(x, str) and x for x in p)
(3, True)
>>> noc_prompts(3, seed=1) == p
True
"""

from __future__ import annotations

import random

__all__ = ["noc_prompts"]

_NFS = ["amf", "smf", "upf", "pcf", "mme", "nrf", "sepp", "ausf", "udm", "sgw", "pgw", "hss"]
_KPIS = [
    ("registration success rate", "%"),
    ("PDU session establishment success rate", "%"),
    ("attach success rate", "%"),
    ("paging success rate", "%"),
    ("handover success rate", "%"),
    ("N4 session setup latency", " ms"),
    ("GTP-U throughput", " Gbps"),
    ("CPU utilisation", "%"),
    ("Diameter answer latency", " ms"),
    ("SBI request error rate", "%"),
]
_ALARMS = [
    "PFCP heartbeat failure",
    "SCTP association down",
    "N2 interface link flap",
    "Diameter peer unreachable",
    "NRF registration expired",
    "GTP-U path failure",
    "TLS certificate expiry warning",
    "high SBI 503 rate",
    "license capacity threshold reached",
    "BGP session to the transport router lost",
]
_PARTNERS = [
    "Telco North",
    "Orange Roaming Hub",
    "Vodafone IPX",
    "partner NOC B",
    "the IPX carrier",
]
_TEMPLATES = [
    "Summarize: {kpi} dropped from {a}{u} to {b}{u} at {t} on {nf}; {alarm} on {nf2}. "
    "Write a {n}-sentence incident summary.",
    "Write a short e-mail to {partner} about a {alarm} between {nf} and {nf2} since {t}. "
    "Ask them to check their side.",
    "Explain what a {alarm} on {nf} usually means and list two first checks.",
    "The {kpi} on {nf} is {b}{u} (normal {a}{u}). Is this an incident? Answer briefly.",
    "Draft a root-cause report: at {t}, {nf} raised {alarm}; {kpi} went from {a}{u} to {b}{u}. "
    "Sections: impact, probable cause, next steps.",
    "A NOC engineer asks: why would {kpi} fall on {nf} while {nf2} looks healthy?",
    "Write a status update for the shift log: {alarm} on {nf} cleared at {t}, "
    "{kpi} back to {a}{u}.",
    "List three questions to ask {partner} about {alarm} affecting {nf}.",
]


def _nf(rng: random.Random) -> str:
    return f"{rng.choice(_NFS)}-{rng.randint(1, 9)}"


def noc_prompts(n: int, *, seed: int = 0) -> list[str]:
    """``n`` varied NOC-style user prompts (deterministic for a seed)."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(n):
        kpi, unit = rng.choice(_KPIS)
        a = round(rng.uniform(60, 99.9), 1)
        b = round(a * rng.uniform(0.4, 0.95), 1)
        out.append(
            rng.choice(_TEMPLATES).format(
                kpi=kpi,
                u=unit,
                a=a,
                b=b,
                t=f"{rng.randint(0, 23):02d}:{rng.choice([0, 5, 10, 15, 30, 45]):02d}",
                nf=_nf(rng),
                nf2=_nf(rng),
                alarm=rng.choice(_ALARMS),
                partner=rng.choice(_PARTNERS),
                n=rng.choice([2, 3, 4]),
            )
        )
    return out
