"""The drafter: one object that writes reports, partner e-mails and chat answers for one pack
and network (the writers of :mod:`.report`, :mod:`.partner_email` and :mod:`.chat`, on the
configuration and views of :mod:`.views`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from knowledge.pack import Pack
from knowledge.topology import Topology
from noc_assistant.integrations.llm import LlmClient
from noc_assistant.triage.drafting.chat import TriageChat
from noc_assistant.triage.drafting.partner_email import PartnerEmails
from noc_assistant.triage.drafting.report import ReportWriter

if TYPE_CHECKING:
    from noc_assistant.settings import Settings

__all__ = ["Drafter"]


class Drafter(ReportWriter, PartnerEmails, TriageChat):
    """Writes reports, partner e-mails and chat answers for one pack and network."""

    @classmethod
    def from_settings(
        cls, pack: Pack, topology: Topology | Callable[[], Topology], settings: Settings
    ) -> Drafter:
        """The drafter the settings describe: the model of ``NOC_LLM_*``, our name, signature
        and contact for partner e-mails (``NOC_OPERATOR_NAME``, ``NOC_EMAIL_SIGNATURE``,
        ``NOC_OPERATOR_CONTACT``)."""
        return cls(
            pack,
            topology,
            llm=LlmClient.from_settings(settings),
            network=settings.operator_name,
            signature=settings.email_signature,
            contact=settings.operator_contact,
            max_tool_calls=settings.chat_max_tool_calls,
            chat_budget_s=min(settings.chat_timeout_s, settings.llm_timeout_s),
        )
