"""Guardrails: the code that enforces the knowledge pack's guardrail policies
(``knowledge/guardrails/*.yaml``: subscriber-identifier masking, evidence and number grounding,
prompt-injection handling) on LLM input and output. Policies are data; this package holds the
enforcement, which the drafting stage calls before any text reaches a model or a person.

* :mod:`guardrails.masking`: :class:`Masker` masks IMSI/SUPI, SUCI, MSISDN/GPSI and IMEI/PEI
  in text (:meth:`Masker.mask`) and JSON-like payloads (:meth:`Masker.mask_mapping`).
* :mod:`guardrails.injection`: :func:`screen` scans untrusted text for suspicious phrases,
  applies ``on_detect`` and wraps it as data; :func:`system_instruction` for the system prompt.
* :mod:`guardrails.grounding`: :func:`check_grounding` checks a draft's ``[ev-…]`` and
  ``[ref:…]`` citations and that its numbers match the cited evidence.
* :mod:`guardrails.errors`: typed errors, all :class:`~noc_assistant.errors.NocError`.

Order for text headed to a model: mask, then screen (untrusted text); for a draft headed to a
person: check grounding, then mask.

>>> from knowledge.pack import load_pack
>>> pack = load_pack()
>>> log = "UE imsi-262011234567890 failed registration cause 5GMM#7"
>>> screen(Masker.from_pack(pack).mask(log).text, "log", injection_policy(pack)).text
'<data source="log">UE imsi-26201&lt;masked&gt; failed registration cause 5GMM#7</data>'
"""

from guardrails.errors import (
    GuardrailError,
    GuardrailPolicyError,
    InjectionDetectedError,
    MaskingError,
    UntrustedSourceError,
)
from guardrails.grounding import (
    EvidenceLike,
    GroundingIssue,
    GroundingReport,
    IssueKind,
    UngroundedError,
    check_grounding,
    cite_numbers,
)
from guardrails.injection import (
    Screened,
    injection_policy,
    scan,
    screen,
    system_instruction,
    wrap_untrusted,
)
from guardrails.masking import ExampleResult, Masker, MaskResult, check_examples, luhn_valid

__all__ = [
    "EvidenceLike",
    "ExampleResult",
    "GroundingIssue",
    "GroundingReport",
    "GuardrailError",
    "GuardrailPolicyError",
    "InjectionDetectedError",
    "IssueKind",
    "MaskResult",
    "Masker",
    "MaskingError",
    "Screened",
    "UngroundedError",
    "UntrustedSourceError",
    "check_examples",
    "check_grounding",
    "cite_numbers",
    "injection_policy",
    "luhn_valid",
    "scan",
    "screen",
    "system_instruction",
    "wrap_untrusted",
]
