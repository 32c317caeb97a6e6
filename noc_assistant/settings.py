"""Settings, read from the environment (prefix ``NOC_``) and an optional ``.env`` file.

Nothing reads settings at import time: call :func:`get_settings` (cached) where a value is
needed, and ``get_settings.cache_clear()`` in tests that change the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    """All tunables of the application; each maps to ``NOC_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="NOC_", env_file=".env", extra="ignore")

    db_url: str = "sqlite:///noc.db"
    """``sqlite:///PATH`` (embedded default) or ``postgresql://USER[:PASSWORD]@HOST/DB``
    (:mod:`noc_assistant.store.postgres`); the password belongs in the environment, not the repo."""
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    api_token: SecretStr | None = None
    """A shared bearer token that acts as an admin named ``api-token`` (deployments from
    before named users; ``noc user add`` makes per-user tokens with roles). Whoever holds it
    names the person acting in the request (``by``, ``approver``…). Without it and without
    any user the write endpoints answer 503."""
    api_read_token: SecretStr | None = None
    """A shared bearer token of a viewer: reads of drafting (a report, a chat answer, the kept
    chat) need it or another valid token when it is set or any user exists: they call the
    model, which anyone on the network could otherwise keep busy. Unset, with no user: those
    reads are open."""
    chat_rate_per_min: int = Field(default=12, ge=1)
    """Chat answers and narrated reports one caller (a token, else a client address) may ask
    for per minute; the next gets 429 with ``Retry-After``. One answer holds the model for
    seconds: a few callers must not starve everyone else."""
    chat_max_concurrent: int = Field(default=4, ge=1)
    """Model calls of the console at once (chat, narrated reports); more wait their turn, so
    they never take all the web server's worker threads."""
    data_dir: Path = Path("data")
    """Where `noc demo` writes its simulated telemetry, labels and inventory."""
    pack_dir: Path | None = None
    """An operator overlay pack applied on top of the default knowledge pack."""
    correlation_window_s: float = 600.0
    """Findings of one entity closer than this join the same incident."""
    resolve_after_s: float = 300.0
    """An incident with no new finding for this long is resolved."""
    repage_after_s: float = 300.0
    """A stronger symptom joining an incident pages again (an escalation) only this long after
    its last page; sooner it is shown as an update of that page (Alertmanager's
    ``group_interval``, 5 minutes by default)."""
    llm_base_url: str = "http://127.0.0.1:8000/v1"
    llm_api_key: SecretStr = SecretStr("local")
    llm_model: str = "smollm2-135m-instruct"
    llm_timeout_s: float = 120.0
    """How long a report's narration or a chat answer waits for the model before the
    answer falls back to the template (the diagnosis alone)."""
    chat_max_tool_calls: int = Field(default=1, ge=0, le=8)
    """How many read-only look-ups (KPI readings, an evidence item, neighbours, similar
    incidents, a fault's rule) the triage chat's model may make for one answer. Each costs a
    round of generation over its result: on two CPU cores with the default model about 2 s,
    and the 135M model mostly repeats its first look-up; a larger model on a GPU server
    makes good use of more."""
    chat_timeout_s: float = Field(default=30.0, gt=0)
    """The most one chat answer may take, look-ups included, before the diagnosis-alone
    answer is given instead."""
    operator_name: str = "noc"
    """How our network names itself to roaming partners (partner-NOC e-mail subjects)."""
    email_signature: str = "NOC on-call"
    """The closing line of partner-NOC e-mails."""
    operator_contact: str = ""
    """How a partner's NOC reaches ours (phone, e-mail, escalation line), shown under the
    signature of partner-NOC e-mails; unset: no contact line."""
    alertmanager_url: str | None = None
    """A Prometheus Alertmanager (``http://HOST:9093``) that ``noc bus worker`` sends its
    incidents to (v2 API), beside the database."""
    console_url: str | None = None
    """The console's address as the on-call reaches it: alerts link to their incident page."""
    ack_timeout_s: float = Field(900.0, ge=0.0)
    """A live command (``noc watch``, ``noc bus worker``) pages again when nobody has
    acknowledged an open incident (one ranked a fault) this long after it first saw it: an
    ``UNACKNOWLEDGED`` line and, with Alertmanager, a second alert
    (``NocIncidentUnacknowledged``) to route to whoever is next in line. 0: never."""
    nats_url: str = "nats://127.0.0.1:4222"
    nats_stream: str = "NOC_TELEMETRY"
    """The JetStream stream that carries telemetry (subjects ``<prefix>.<entity>``)."""
    nats_subject_prefix: str = "noc.telemetry"
    nats_findings_stream: str = "NOC_FINDINGS"
    """Where detector workers of slices (``noc bus worker --findings``) send their ticks'
    findings for the network-wide correlator (``noc bus correlate``)."""
    nats_findings_prefix: str = "noc.findings"
    state_key: SecretStr | None = None
    """Signs pipeline snapshots (``noc bus worker``, ``--checkpoint``): a restart resumes the
    detectors' learnt state only from a snapshot this key signed."""
    local_tz: str | None = None
    """The network's time zone, an IANA name (``Europe/Berlin``, ``America/Chicago``): the
    wall clock the detectors' daily, weekly and day-type profiles follow, daylight saving
    included (traffic follows local time, not UTC). An entity of the inventory may name its
    own (``"tz"``). Unset: ``local_utc_offset_h``."""
    local_utc_offset_h: float = Field(0.0, ge=-12.0, le=14.0)
    """The network's local time as a fixed offset, in hours east of UTC, where ``local_tz``
    is unset (a network whose clocks never change)."""
    weekend_days: tuple[Annotated[int, Field(ge=0, le=6)], ...] = (5, 6)
    """The weekend's weekdays (Monday 0 … Sunday 6; ``[4,5]`` for Friday–Saturday)."""
    smtp_host: str | None = None
    """The SMTP server that sends approved partner-NOC e-mails
    (:mod:`noc_assistant.integrations.mail`); unset: sending is not configured."""
    smtp_port: int = 25
    """The SMTP server's port (25; 587 with ``smtp_starttls``)."""
    smtp_sender: str = "noc-assistant@localhost"
    """The ``From`` address of the e-mails; its domain also names their ``Message-ID``."""
    smtp_username: str | None = None
    """Log in as this user (SMTP AUTH); unset: send without logging in."""
    smtp_password: SecretStr | None = None
    """The password of ``smtp_username``; it belongs in the environment, not the repo."""
    smtp_starttls: bool = False
    """Switch the connection to TLS (STARTTLS) before logging in and sending."""
    smtp_ca_file: Path | None = None
    """PEM file of the authorities that sign the SMTP server's certificate (a company's own
    CA); default: the system's. The server's name is always checked."""
    smtp_timeout_s: float = 10.0
    """How long to wait for the SMTP server, per connection and per reply."""
    notify_routes: Path | None = None
    """A YAML or JSON file of notification routes (webhook, Slack/Mattermost, PagerDuty:
    :mod:`noc_assistant.integrations.notify`) that live commands send incident events to;
    it holds webhook URLs and routing keys, so it lives outside the repository. Unset: no
    notifications."""

    @field_validator("local_tz")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            from detectors.clock import zone

            zone(value)  # a ValueError naming the zone: pydantic names the field
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings (cached; clear with ``get_settings.cache_clear()``)."""
    return Settings()
