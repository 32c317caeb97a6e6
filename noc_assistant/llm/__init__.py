"""The LLM client side: the only module that talks to an OpenAI-compatible endpoint (the
built-in server in ``noc_assistant.serving`` or any other)."""
