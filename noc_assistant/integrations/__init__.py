"""Outside systems, one module each: the only code that speaks their protocols.

- :mod:`.bus`: NATS JetStream (telemetry, findings and incidents at scale);
- :mod:`.alertmanager`: incidents as Prometheus Alertmanager alerts;
- :mod:`.prometheus`: a Prometheus server as a telemetry source;
- :mod:`.mail`: approved partner-NOC e-mails over SMTP;
- :mod:`.llm`: an OpenAI-compatible LLM endpoint (the built-in server or any other).
"""
