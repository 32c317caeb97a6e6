"""Typed errors of the guardrails (all are :class:`~noc_assistant.errors.NocError`)::

    GuardrailError               base of everything a guardrail raises on purpose
    ├── GuardrailPolicyError     a pack policy that cannot be enforced (also a ConfigError, exit 2)
    ├── MaskingError             a payload that cannot be masked safely
    ├── UntrustedSourceError     wrapping text from a source the injection policy does not list
    ├── InjectionDetectedError   suspicious phrases in untrusted text, policy ``on_detect: reject``
    └── UngroundedError          unsupported claims in a draft, policy ``unsupported_claim: reject``

>>> err = GuardrailPolicyError("regex does not compile", pattern_id="supi-imsi")
>>> str(err)
'masking pattern supi-imsi: regex does not compile'
>>> isinstance(err, ConfigError)
True
"""

from __future__ import annotations

from noc_assistant.errors import ConfigError, NocError

__all__ = [
    "GuardrailError",
    "GuardrailPolicyError",
    "InjectionDetectedError",
    "MaskingError",
    "UntrustedSourceError",
]


class GuardrailError(NocError):
    """Base class of every error a guardrail raises on purpose."""


class GuardrailPolicyError(GuardrailError, ConfigError):
    """A guardrail policy of the pack that cannot be enforced.

    ``pattern_id`` names the masking pattern at fault, where one is.
    """

    def __init__(self, message: str, *, pattern_id: str | None = None) -> None:
        self.pattern_id = pattern_id
        super().__init__(f"masking pattern {pattern_id}: {message}" if pattern_id else message)


class MaskingError(GuardrailError):
    """A payload that cannot be masked without losing or leaking data."""


class UntrustedSourceError(GuardrailError):
    """Text to wrap comes from a source the injection policy does not list."""

    def __init__(self, source: str, allowed: tuple[str, ...]) -> None:
        self.source = source
        self.allowed = allowed
        super().__init__(
            f"unknown untrusted source {source!r}; the injection policy lists: "
            + ", ".join(allowed)
        )


class InjectionDetectedError(GuardrailError):
    """Untrusted text holds suspicious phrases and the policy says ``on_detect: reject``."""

    def __init__(self, source: str, findings: tuple[str, ...]) -> None:
        self.source = source
        self.findings = findings
        super().__init__(
            f"{source} text rejected: suspicious phrases " + ", ".join(repr(f) for f in findings)
        )
