"""noc-assistant: a diagnostic assistant for telecom Network Operations Centres.

The application package wires the stages together (ingest → detectors → correlator → RCA →
drafting) and owns the CLI, settings, storage and web API. Domain knowledge lives in the
``knowledge`` package, detectors in ``detectors``, prompt wording in ``prompts``.
"""

__version__ = "0.1.0"
