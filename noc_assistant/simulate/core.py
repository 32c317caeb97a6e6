"""The packet-core renderer: AMF, SMF, UPF, PCF (5G core) and MME, HSS (EPC) series from the
knobs and the traffic of one chunk."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from noc_assistant.simulate.faults import AMF_SERVICES, SMF_SERVICES
from noc_assistant.simulate.network import Entity, Network, plmn_digits
from noc_assistant.simulate.series import (
    AMF_REG_CAUSES,
    SBI_LATENCY_LE,
    SBI_OK,
    SNSSAI,
    skey,
)
from noc_assistant.simulate.traffic import Arr, RenderChunk, TrafficProfile, lognormal_cdf

__all__ = ["PacketCore"]


def _sbi_keys(svc: str, code: str) -> str:
    method = SBI_OK[svc][0]
    return skey(
        "free5gc_sbi_outbound_request_total",
        target_service_name=svc,
        status_code=code,
        method=method,
    )


def _sbi_hist_key(svc: str, suffix: str, le: str | None = None) -> str:
    method, ok = SBI_OK[svc]
    metric = f"free5gc_sbi_outbound_request_duration_seconds_{suffix}"
    if le is not None:
        return skey(metric, le=le, method=method, target_service_name=svc, status_code=ok)
    return skey(metric, method=method, target_service_name=svc, status_code=ok)


class PacketCore:
    """Renders the packet core's series into a :class:`RenderChunk`."""

    def __init__(self, net: Network, profile: TrafficProfile) -> None:
        self.net = net
        self.p = profile

    def render(self, c: RenderChunk) -> None:
        """Every packet-core entity, in dependency order (AMFs and SMFs before what they
        feed)."""
        for e in self.net.by_type("amf"):
            self._amf(c, e)
        for e in self.net.by_type("smf"):
            self._smf(c, e)
        for e in self.net.by_type("upf"):
            self._upf(c, e)
        for e in self.net.by_type("pcf"):
            self._pcf(c, e)
        for e in self.net.by_type("mme"):
            self._mme(c, e)
        for e in self.net.by_type("hss"):
            self._hss(c, e)

    def _sbi_state(self, c: RenderChunk, ent: str, services: Sequence[str]) -> dict[str, Arr]:
        """Failure share of each service call (not answered 2xx, or never sent)."""
        k = c.knobs
        err: dict[str, Arr] = {}
        for svc in services:
            e = (
                k.get(ent, f"sbi_timeout:{svc}")
                + k.get(ent, f"sbi_connerr:{svc}")
                + k.get(ent, f"sbi_unavail:{svc}")
                + k.get(ent, f"sbi_skip:{svc}")
            )
            err[svc] = np.clip(e, 0.0, 1.0)
        return err

    @staticmethod
    def _sbi_timeouts(c: RenderChunk, ent: str, svc: str) -> Arr:
        """Share of ``svc`` calls answered 504: a producer that does not answer in time; an
        unavailable one times out too, but for the NRF, which answers 503."""
        k = c.knobs
        to = k.frac(ent, f"sbi_timeout:{svc}")
        if svc == "nnrf-disc":
            return to
        return np.clip(to + k.frac(ent, f"sbi_unavail:{svc}"), 0.0, 1.0)

    def _sbi_emit(self, c: RenderChunk, ent: str, svc: str, rate: Arr, load: Arr) -> None:
        k = c.knobs
        skip = k.frac(ent, f"sbi_skip:{svc}")
        sent = rate * (1.0 - skip)
        to = self._sbi_timeouts(c, ent, svc)
        ce = k.frac(ent, f"sbi_connerr:{svc}")
        un = k.frac(ent, f"sbi_unavail:{svc}") if svc == "nnrf-disc" else np.zeros(c.n)
        ok_share = np.clip(1.0 - to - ce - un, 0.0, 1.0)
        ok = c.count(ent, _sbi_keys(svc, SBI_OK[svc][1]), sent * ok_share)
        c.count(ent, _sbi_keys(svc, "504"), sent * to)
        c.count(ent, _sbi_keys(svc, "0"), sent * ce)
        if svc == "nnrf-disc":
            c.count(ent, _sbi_keys(svc, "503"), sent * un)
        median = dict(self.p.sbi_median_s)[svc] * k.get(ent, f"sbi_latency_mult:{svc}")
        median = median * (1.0 + 0.15 * load) * c.noise.wobble(f"{ent}|lat|{svc}", 0.05)
        sigma = 0.45
        mean = median * math.exp(sigma * sigma / 2)
        c.put(ent, _sbi_hist_key(svc, "count"), ok)
        c.put(ent, _sbi_hist_key(svc, "bucket", "+Inf"), ok)
        below = np.minimum(
            c.noise.sround(
                f"{ent}|le|{svc}", ok * lognormal_cdf(float(SBI_LATENCY_LE), median, sigma)
            ),
            ok,
        )
        c.put(ent, _sbi_hist_key(svc, "bucket", SBI_LATENCY_LE), below)
        jitter = 1.0 + 0.1 * c.noise.normal(f"{ent}|lsum|{svc}")
        c.put(ent, _sbi_hist_key(svc, "sum"), ok * mean * np.maximum(jitter, 0.5))

    def _load_share(self, e: Entity) -> float:
        """``e``'s traffic relative to a typical NF of its type: its share of the type's
        traffic times their number (about 1 each; a larger network carries more traffic,
        not thinner NFs)."""
        return e.share * len(self.net.by_type(e.type))

    def _amf(self, c: RenderChunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        gl = k.frac(ent, "gnb_loss")
        reach = (1.0 - gl) * up
        s2 = self._load_share(e)
        load = c.core * nz.wobble(f"{ent}|load")
        c.gauge(ent, "gnb", np.round(p.gnb_per_amf * reach))
        ran = p.ran_ue_peak * s2 * load * reach
        c.gauge(ent, "ran_ue", np.round(ran), 0.01)
        c.gauge(ent, "amf_session", np.round(ran * 0.92), 0.01)

        err = self._sbi_state(c, ent, AMF_SERVICES)
        cong = k.frac(ent, "congestion_reject")
        lam_init = p.reg_init_peak * s2 * load * k.get(ent, "reg_init_mult") * reach
        self._amf_initial(c, ent, lam_init, err, cong)

        lam_mob = p.reg_mob_peak * s2 * load * k.get(ent, "reg_mob_mult") * reach
        f_mob = 1.0 - (1.0 - 0.002) * (1.0 - 0.5 * cong) * (1.0 - err["nudm-sdm"])
        mob = c.count(ent, "fivegs_amffunction_rm_regmobreq", lam_mob)
        mob_fail = np.minimum(nz.poisson(f"{ent}|mobfail", lam_mob * f_mob * c.dt), mob)
        c.put(ent, "fivegs_amffunction_rm_regmobsucc", mob - mob_fail)

        lam_pg = p.paging_peak * s2 * load * up * (1.0 + 0.6 * gl)
        pg = c.count(ent, "fivegs_amffunction_mm_paging5greq", lam_pg)
        pg_ok = np.clip(0.985 * (1.0 - 0.95 * gl), 0.0, 1.0)
        pg_fail = np.minimum(nz.poisson(f"{ent}|pgfail", lam_pg * (1.0 - pg_ok) * c.dt), pg)
        c.put(ent, "fivegs_amffunction_mm_paging5gsucc", pg - pg_fail)

        lam_auth = lam_init * (1.0 - cong) * 1.02 + lam_mob * 0.05
        c.count(ent, "fivegs_amffunction_amf_authreq", lam_auth)
        c.count(ent, skey("fivegs_amffunction_amf_authfail", cause="20"), lam_auth * 0.0008)
        synch = 0.002 + k.get(ent, "auth_synch_fail")
        c.count(ent, skey("fivegs_amffunction_amf_authfail", cause="21"), lam_auth * synch)
        self._amf_subscribers(c, e, up)

        admitted = lam_init * (1.0 - cong)
        rates = {
            "nausf-auth": lam_auth,
            "nudm-uecm": admitted * (1.0 - err["nausf-auth"]),
            "nudm-sdm": admitted * (1.0 - err["nausf-auth"]) + 0.3 * lam_mob,
            "nnrf-disc": (0.3 + 0.002 * lam_init) * k.get(ent, "disc_rate_mult") * up,
        }
        for svc in AMF_SERVICES:
            self._sbi_emit(c, ent, svc, rates[svc], load)

    def _amf_initial(
        self, c: RenderChunk, ent: str, lam_init: Arr, err: dict[str, Arr], cong: Arr
    ) -> None:
        """Initial registrations by PLMN, their rejects by 5GMM cause, and the successful
        rate the PCF sees."""
        p, k, nz = self.p, c.knobs, c.noise
        reg_calls = ("nausf-auth", "nudm-uecm", "nudm-sdm")  # what a registration waits for
        f_sbi = 1.0 - np.prod([1.0 - err[svc] for svc in reg_calls], axis=0)
        plmns = [
            (
                plmn_digits(self.net.home_plmn),
                1.0 - sum(x.share for x in self.net.partners),
                np.zeros(c.n),
            )
        ]
        plmns += [
            (plmn_digits(x.plmn), x.share, k.frac(ent, f"plmn_fail:{x.plmn}"))
            for x in self.net.partners
        ]
        fail_total = np.zeros(c.n)
        exp_fail = np.zeros(c.n)
        succ_rate = np.zeros(c.n)
        for digits, share, pf in plmns:
            lam = lam_init * share
            f = 1.0 - (1.0 - p.reg_base_fail) * (1.0 - cong) * (1.0 - f_sbi) * (1.0 - pf)
            req = c.count(ent, skey("fivegs_amffunction_rm_reginitreq", plmnid=digits), lam)
            fail = np.minimum(nz.poisson(f"{ent}|regfail|{digits}", lam * f * c.dt), req)
            c.put(ent, skey("fivegs_amffunction_rm_reginitsucc", plmnid=digits), req - fail)
            fail_total += fail
            exp_fail += lam * f
            succ_rate += lam * (1.0 - f)
        share22 = np.clip(
            lam_init * (p.reg_base_fail * 0.3 + cong) / np.maximum(exp_fail, 1e-9), 0.0, 1.0
        )
        c22 = np.minimum(nz.sround(f"{ent}|c22", fail_total * share22), fail_total)
        # an AUSF or UDM answer that timed out (504) is rejected with 5GMM cause #90, "payload
        # was not forwarded" (Open5GS gmm_cause_from_sbi); other failures with #111
        timeouts = 1.0 - np.prod(
            [1.0 - self._sbi_timeouts(c, ent, svc) for svc in reg_calls], axis=0
        )
        share90 = np.clip(
            lam_init
            * (p.reg_base_fail * 0.1 + (1.0 - cong) * timeouts)
            / np.maximum(exp_fail, 1e-9),
            0.0,
            1.0,
        )
        c90 = np.minimum(nz.sround(f"{ent}|c90", fail_total * share90), fail_total - c22)
        causes = {"22": c22, "90": c90, "111": fail_total - c22 - c90}
        for cause in AMF_REG_CAUSES:
            c.put(ent, skey("fivegs_amffunction_rm_reginitfail", cause=cause), causes[cause])
        c.shared[f"{ent}|reg_succ_rate"] = succ_rate

    def _amf_subscribers(self, c: RenderChunk, e: Entity, up: Arr) -> None:
        """Registered subscribers: home, and each partner's inbound roamers."""
        p, k, ent = self.p, c.knobs, e.id
        slow = (0.9 + 0.1 * c.core) * c.noise.wobble(f"{ent}|subs", 0.01)
        sub_keep = (1.0 - k.frac(ent, "sub_loss")) * up
        home = plmn_digits(self.net.home_plmn)
        c.gauge(
            ent,
            skey("fivegs_amffunction_rm_registeredsubnbr", plmnid=home, snssai=SNSSAI),
            np.round(p.home_subscribers * self._load_share(e) * slow * sub_keep),
        )
        for j, x in enumerate(self.net.partners):
            keep = 1.0 - k.frac(ent, f"plmn_sub_loss:{x.plmn}")
            roam = p.roamers[j % len(p.roamers)] * self._load_share(e) * slow * sub_keep * keep
            c.gauge(
                ent,
                skey(
                    "fivegs_amffunction_rm_registeredsubnbr",
                    plmnid=plmn_digits(x.plmn),
                    snssai=SNSSAI,
                ),
                np.round(roam),
            )

    def _smf(self, c: RenderChunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        s2 = self._load_share(e)
        load = c.core * nz.wobble(f"{ent}|load")
        lam_pdu = p.pdu_peak * s2 * load * up
        peers = self.net.smf_peers[ent]
        share_u = 1.0 / len(peers)
        lost = {u: k.frac(u, "n4_lost") for u in peers}
        f_n4 = sum((share_u * lost[u] for u in peers), np.zeros(c.n))
        err = self._sbi_state(c, ent, SMF_SERVICES)
        f_udm, f_pcf = err["nudm-sdm"], err["npcf-smpolicycontrol"]
        to_udm = np.clip(k.get(ent, "sbi_timeout:nudm-sdm"), 0, 1)
        to_pcf = np.clip(k.get(ent, "sbi_timeout:npcf-smpolicycontrol"), 0, 1)
        base403 = 0.001
        f_all = 1.0 - (1 - base403) * (1 - f_udm) * (1 - f_pcf) * (1 - f_n4)
        w504 = to_udm + (1 - f_udm) * to_pcf
        w403 = np.full(c.n, base403)
        w500 = np.maximum(f_all - w504 - w403, 0.0) + 1e-4
        req = c.count(
            ent,
            skey(
                "fivegs_smffunction_sm_pdusessioncreationreq",
                plmnid=plmn_digits(self.net.home_plmn),
                snssai=SNSSAI,
            ),
            lam_pdu,
        )
        fail = np.minimum(nz.poisson(f"{ent}|pdufail", lam_pdu * f_all * c.dt), req)
        c.put(
            ent,
            skey(
                "fivegs_smffunction_sm_pdusessioncreationsucc",
                plmnid=plmn_digits(self.net.home_plmn),
                snssai=SNSSAI,
            ),
            req - fail,
        )
        wsum = w504 + w403 + w500
        n504 = np.minimum(nz.sround(f"{ent}|c504", fail * w504 / wsum), fail)
        n403 = np.minimum(nz.sround(f"{ent}|c403", fail * w403 / wsum), fail - n504)
        for cause, v in (("403", n403), ("500", fail - n504 - n403), ("504", n504)):
            c.put(ent, skey("fivegs_smffunction_sm_pdusessioncreationfail", cause=cause), v)

        lam_n4 = lam_pdu * (1 - f_udm) * (1 - f_pcf)
        c.count(ent, "fivegs_smffunction_sm_n4sessionestabreq", lam_n4)
        c.count(ent, skey("fivegs_smffunction_sm_n4sessionestabfail", cause="72"), lam_n4 * f_n4)
        c.count(ent, skey("fivegs_smffunction_sm_n4sessionestabfail", cause="74"), lam_n4 * 3e-4)
        c.count(ent, skey("fivegs_smffunction_sm_n4sessionestabfail", cause="77"), lam_n4 * 1e-4)
        c.gauge(ent, "pfcp_peers_active", sum(((lost[u] < 0.5) * up for u in peers), np.zeros(c.n)))
        self._smf_sessions(c, e, up, lam_n4, lost, load)
        c.shared[f"{ent}|pdu_rate"] = lam_pdu
        rates = {
            "nudm-sdm": lam_pdu,
            "npcf-smpolicycontrol": lam_pdu * (1 - f_udm),
            "nnrf-disc": (0.2 + 0.002 * lam_pdu) * k.get(ent, "disc_rate_mult") * up,
        }
        for svc in SMF_SERVICES:
            self._sbi_emit(c, ent, svc, rates[svc], load)
        ce = k.frac(ent, "sbi_connerr:npcf-smpolicycontrol")
        skip = k.frac(ent, "sbi_skip:npcf-smpolicycontrol")
        c.shared[f"{ent}|pcf_sm_rate"] = rates["npcf-smpolicycontrol"] * (1 - ce) * (1 - skip)

    def _smf_sessions(
        self, c: RenderChunk, e: Entity, up: Arr, lam_n4: Arr, lost: dict[str, Arr], load: Arr
    ) -> None:
        """PFCP sessions on each peer UPF, the SMF's session gauges and its S8 traffic."""
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        peers = self.net.smf_peers[ent]
        share_u = 1.0 / len(peers)
        s2 = self._load_share(e)
        sessions = p.sessions_per_smf * s2 * (0.45 + 0.55 * c.core) * nz.wobble(f"{ent}|sess", 0.02)
        total = np.zeros(c.n)
        for u in peers:
            part = sessions * share_u * (1.0 - k.frac(u, "session_decay")) * up
            c.shared[f"{u}|sessions|{ent}"] = part
            c.shared[f"{u}|n4req|{ent}"] = lam_n4 * share_u * (1.0 - lost[u])
            total = total + part
        c.gauge(ent, "pfcp_sessions_active", np.round(total), 0.002)
        c.gauge(
            ent,
            skey(
                "fivegs_smffunction_sm_sessionnbr",
                plmnid=plmn_digits(self.net.home_plmn),
                snssai=SNSSAI,
            ),
            np.round(total * 0.985),
            0.002,
        )
        for j, x in enumerate(self.net.partners):
            rate = p.s8_peak[j % len(p.s8_peak)] * s2 * load * up
            rate = rate * (1.0 - k.frac(ent, f"s8_fail:{x.plmn}"))
            c.count(ent, skey("gtp_node_s5c_rx_createsession", addr=x.s8_peer), rate)

    def _upf(self, c: RenderChunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        smfs = self.net.smfs_of_upf(ent)
        lost = k.frac(ent, "n4_lost")
        sessions = sum((c.shared[f"{ent}|sessions|{m}"] for m in smfs), np.zeros(c.n))
        c.gauge(ent, "fivegs_upffunction_upf_sessionnbr", np.round(sessions), 0.002)
        c.gauge(ent, "pfcp_peers_active", np.round(len(smfs) * (lost < 0.5) * up))
        n4 = sum((c.shared[f"{ent}|n4req|{m}"] for m in smfs), np.zeros(c.n))
        c.count(ent, "fivegs_upffunction_sm_n4sessionestabreq", n4)
        weight = len(smfs) / 1.333
        traffic = c.core**1.3 * nz.wobble(f"{ent}|bytes", 0.06) * weight * up
        drop = k.frac(ent, "gtpu_drop")
        ul = p.ul_bytes_peak * traffic
        jitter = 1.0 + 0.01 * nz.normal(f"{ent}|ul")
        c.put(
            ent,
            skey("node_network_receive_bytes_total", device="n3"),
            np.round(ul * (1 - drop) * jitter * c.dt),
        )
        dl = p.dl_bytes_peak * traffic * np.clip(1.0 - 1.8 * drop, 0.0, 1.0)
        c.put(
            ent,
            skey("node_network_transmit_bytes_total", device="n3"),
            np.round(dl * (1.0 + 0.01 * nz.normal(f"{ent}|dl")) * c.dt),
        )
        pkts = ul / p.ul_packet_bytes
        c.put(
            ent,
            skey("node_network_receive_packets_total", device="n3"),
            np.round(pkts * (1 - drop) * jitter * c.dt),
        )
        c.count(ent, skey("node_network_receive_drop_total", device="n3"), pkts * (drop + 2e-6))

    def _pcf(self, c: RenderChunk, e: Entity) -> None:
        k, ent = c.knobs, e.id
        up = 1.0 - k.frac(ent, "drain")
        am = (
            sum((c.shared[f"{a.id}|reg_succ_rate"] for a in self.net.by_type("amf")), np.zeros(c.n))
            * up
        )
        sm = (
            sum((c.shared[f"{m.id}|pcf_sm_rate"] for m in self.net.by_type("smf")), np.zeros(c.n))
            * up
        )
        home = plmn_digits(self.net.home_plmn)
        for name, rate in (("am", am), ("sm", sm)):
            req = c.count(
                ent,
                skey(f"fivegs_pcffunction_pa_policy{name}assoreq", plmnid=home, snssai=SNSSAI),
                rate,
            )
            fail = np.minimum(c.noise.poisson(f"{ent}|{name}fail", rate * 5e-4 * c.dt), req)
            c.put(
                ent,
                skey(f"fivegs_pcffunction_pa_policy{name}assosucc", plmnid=home, snssai=SNSSAI),
                req - fail,
            )
        sessions = sum(
            (
                c.shared[f"{u}|sessions|{m}"]
                for m, peers in self.net.smf_peers.items()
                for u in peers
            ),
            np.zeros(c.n),
        )
        c.gauge(
            ent,
            skey("fivegs_pcffunction_pa_sessionnbr", plmnid=home, snssai=SNSSAI),
            np.round(sessions * 0.99 * up),
            0.002,
        )

    # -- EPC (converged core) -----------------------------------------------------------------

    def _s6a_fail(self, c: RenderChunk) -> Arr:
        """Share of S6a requests the HSS answers with an error (one HSS, as in Open5GS)."""
        hss = self.net.by_type("hss")
        extra = sum((c.knobs.frac(h.id, "s6a_error") for h in hss), np.zeros(c.n))
        return np.asarray(np.clip(self.p.s6a_base_fail + extra, 0.0, 1.0), dtype=np.float64)

    def _mme(self, c: RenderChunk, e: Entity) -> None:
        """S1 state, gateway-selection DNS lookups, and the S6a load it puts on the HSS.

        An attach (or PDN connectivity request) asks the HSS for authentication vectors (AIR)
        and registers the MME (ULR) and selects its SGW and PGW by DNS (TS 29.303); a
        tracking-area update does so now and then. Failed S6a requests are retried."""
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        reach = (1.0 - k.frac(ent, "gnb_loss")) * up
        s2 = self._load_share(e)
        load = c.core * nz.wobble(f"{ent}|load")
        c.gauge(ent, "enb", np.round(p.enb_per_mme * reach))
        nominal = p.attach_peak * s2 * load * reach
        lam_att = nominal * k.get(ent, "reg_init_mult")
        lam_tau = p.tau_peak * s2 * load * k.get(ent, "reg_mob_mult") * reach
        fail = self._s6a_fail(c)
        keep = (1.0 - k.frac(ent, "sub_loss")) * reach
        ue = p.enb_ue_peak * s2 * load * keep * (1.0 - 0.3 * (fail - p.s6a_base_fail))
        ue = ue + p.ue_context_s * np.maximum(lam_att - nominal, 0.0)
        c.gauge(ent, "enb_ue", np.round(ue), 0.01)
        slow = (0.9 + 0.1 * c.core) * nz.wobble(f"{ent}|subs", 0.01)
        c.gauge(ent, "mme_session", np.round(p.mme_sessions * s2 * slow * keep), 0.002)
        lookups = lam_att + 0.05 * lam_tau
        queries = c.count(ent, "dns_query_total", lookups)
        f_dns = np.clip(p.dns_base_fail + k.get(ent, "dns_fail"), 0.0, 1.0)
        failed = np.minimum(nz.poisson(f"{ent}|dnsfail", lookups * f_dns * c.dt), queries)
        c.put(ent, "dns_query_failed", failed)
        retry = 1.0 + 1.5 * fail
        c.shared[f"{ent}|s6a_air"] = (lam_att + 0.02 * lam_tau) * retry
        c.shared[f"{ent}|s6a_ulr"] = (lam_att * (1.0 - fail) + 0.05 * lam_tau) * retry
        c.shared[f"{ent}|s6a_pur"] = 0.03 * lam_att * up

    def _hss(self, c: RenderChunk, e: Entity) -> None:
        p, k, nz, ent = self.p, c.knobs, c.noise, e.id
        up = 1.0 - k.frac(ent, "drain")
        mmes = self.net.by_type("mme")
        fail = self._s6a_fail(c)
        for msg in ("air", "ulr"):
            rate = sum((c.shared[f"{m.id}|s6a_{msg}"] for m in mmes), np.zeros(c.n)) * up
            got = c.count(ent, f"s6a_rx_{msg}", rate)
            err = np.minimum(nz.poisson(f"{ent}|{msg}err", rate * fail * c.dt), got)
            c.put(ent, f"s6a_rx_{msg}_error", err)
        pur = sum((c.shared[f"{m.id}|s6a_pur"] for m in mmes), np.zeros(c.n)) * up
        c.count(ent, "s6a_rx_pur", pur)
        c.gauge(ent, "hss_imsi", np.full(c.n, round(p.hss_provisioned * len(mmes) / 2)))
