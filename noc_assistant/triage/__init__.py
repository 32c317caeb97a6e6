"""Triage: from an incident to what a person reads and decides.

- :mod:`.rca`: the pack's rules ranked into hypotheses with evidence;
- :mod:`.present`: numbers with units, bands and bounded severities;
- :mod:`.grounded`: the JSON of claims a model may write, and how it is read;
- :mod:`.drafting`: reports, partner e-mails and chat answers, checked before anyone sees them;
- :mod:`.tools`: the look-ups a triage chat may call;
- :mod:`.history`: incidents seen before and beside this one;
- :mod:`.handover`: the shift handover.
"""
