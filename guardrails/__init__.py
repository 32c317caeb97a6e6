"""Guardrails: the code that enforces the knowledge pack's guardrail policies
(``knowledge/guardrails/*.yaml``: subscriber-identifier masking, evidence and number grounding,
prompt-injection handling) on LLM input and output. Policies are data; this package holds the
enforcement, which the drafting stage calls before any text reaches a model or a person."""
