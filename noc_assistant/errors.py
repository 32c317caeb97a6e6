"""Typed errors of noc-assistant.

Libraries raise these; only the CLI turns them into messages and exit codes::

    NocError                      base of everything we raise on purpose
    ├── BadInputError             input data or files that do not follow docs/FORMATS.md (exit 2)
    │   ├── ReplayFormatError     a telemetry replay file (names file and line)
    │   ├── InventoryError        a network inventory file
    │   ├── EmailStateError       an e-mail step its state does not allow (send a draft …)
    │   │   └── FourEyesError     an approval by who drafted or edited the e-mail
    │   ├── UserError             a user name or role that cannot be used
    │   ├── ReviewError           a verdict that does not hold together (root cause half given)
    │   ├── MaintenanceError      a maintenance window that does not hold (no end, too long …)
    │   ├── TuningError           a raised bar that does not hold (unknown KPI, no reason …)
    │   └── NotFoundError         an incident (…) the store does not hold, or not yet in the
    │                             form asked for (``ready`` False: no diagnosis yet)
    ├── ConfigError               settings or a knowledge pack that cannot be used (exit 2)
    │   └── DraftingError         a draft with nothing to write from (noc_assistant.triage.drafting)
    ├── UnreachableError          a configured outside part (NATS, Alertmanager, SMTP …)
    │                             refused or timed out (exit 2, naming what to check)
    ├── StorageError              the database refused or lost a write
    ├── LlmError                  the language model endpoint failed or answered unusably
    └── MailError                 an e-mail not fit to send, or refused (integrations.mail)
"""

from __future__ import annotations

__all__ = [
    "BadInputError",
    "ConfigError",
    "EmailStateError",
    "FourEyesError",
    "InventoryError",
    "LlmError",
    "MaintenanceError",
    "NocError",
    "NotFoundError",
    "ReplayFormatError",
    "ReviewError",
    "StorageError",
    "TuningError",
    "UnreachableError",
    "UserError",
]


class NocError(Exception):
    """Base class of every error noc-assistant raises on purpose."""


class BadInputError(NocError):
    """Input that does not follow the contracts of docs/FORMATS.md.

    ``source`` names the file (or stream) and ``line`` the 1-based line, where known.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        where = source or ""
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}" if where else message)


class ReplayFormatError(BadInputError):
    """A telemetry replay file (JSONL or CSV) that cannot be read as a whole."""


class InventoryError(BadInputError):
    """A network inventory file that does not follow docs/FORMATS.md §4."""


class EmailStateError(BadInputError):
    """A step an e-mail's state does not allow: approving one already sent, sending one not
    approved, editing one no longer a draft."""


class FourEyesError(EmailStateError):
    """An approval by the person who drafted or edited the e-mail: another must approve it."""


class UserError(BadInputError):
    """A user name or role that cannot be used (reserved, malformed, unknown, taken)."""


class ReviewError(BadInputError):
    """A verdict that does not hold together: a root cause without its fault class or entity,
    a root cause with a verdict other than ``fault``, a fault class the pack does not know."""


class MaintenanceError(BadInputError):
    """A maintenance window that does not hold: no end, an end before its start, longer than
    allowed, an entity outside the network."""


class TuningError(BadInputError):
    """A raised bar that does not hold: a KPI the pack does not know, a bar not above the
    detectors' own, no reason given, longer than allowed."""


class NotFoundError(BadInputError):
    """Something asked for by id that the store does not hold; ``ready`` is False where the
    thing exists but not yet in the form asked for (an incident with no diagnosis yet)."""

    def __init__(self, message: str, *, ready: bool = True):
        self.ready = ready
        super().__init__(message)


class ConfigError(NocError):
    """Settings or a knowledge pack that cannot be used."""


class UnreachableError(NocError):
    """A configured outside part (NATS, Alertmanager, an SMTP server, Prometheus, a webhook)
    that refused the connection or timed out: the settings or the part need checking, not
    the code (exit 2). The message names the part and its address, never a secret."""


class StorageError(NocError):
    """The database refused or lost a write."""


class LlmError(NocError):
    """The language model endpoint failed or gave an unusable answer."""
