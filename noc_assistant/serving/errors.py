"""Typed errors of the serving layer.

::

    LlmError (noc_assistant.errors)
    └── ServingError              anything the built-in engine refuses or cannot do
        ├── ModelLoadError        a model directory / GGUF file / checkpoint that cannot be loaded
        │                         (also a ConfigError: the CLI exits 2 on it)
        ├── RequestError          a generation request the engine must refuse (too long, bad args)
        └── Nf12Error             an NF12 container that is corrupt or not BF16
"""

from __future__ import annotations

from noc_assistant.errors import ConfigError, LlmError

__all__ = ["ModelLoadError", "Nf12Error", "RequestError", "ServingError"]


class ServingError(LlmError):
    """Base of the errors raised by ``noc_assistant.serving``."""


class ModelLoadError(ServingError, ConfigError):
    """A model or drafter checkpoint could not be loaded (or not as asked, e.g. at a block size
    it cannot run): a configuration the user can fix, so the CLI exits 2."""


class RequestError(ServingError):
    """A generation request the engine refuses; ``param`` names the offending field."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        self.param = param
        self.code = code
        super().__init__(message)


class Nf12Error(ServingError):
    """An NF12 container that is corrupt, or a tensor that is not BF16."""
