"""numba set-up of the native engine: the vector width and the kernels' decorator.

Imported before any kernel is defined: numba's code generator is configured when its first
jitted function is created, and :func:`_prefer_wide_vectors` must run before that.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["F32", "WIDE_VECTORS"]

F32 = npt.NDArray[np.float32]

_F = TypeVar("_F", bound=Callable[..., Any])


def _prefer_wide_vectors() -> bool:
    """Let LLVM use 512-bit vectors on AVX-512 CPUs (numba's code is 256-bit by default).

    LLVM's x86 tuning prefers 256-bit vectors even where AVX-512 is available (old Xeons lost
    clock speed on 512-bit code); for these kernels 512-bit halves the instruction count of
    the unpacking and the products and makes decoding ~25 % faster on a Sapphire Rapids core.
    numba has one code generator per process, configured when its first jitted function is
    created, so this can only be set before that and applies to every numba function the
    process compiles afterwards. That changes speed only: no numba code here reassociates
    floating-point arithmetic (no ``fastmath``), and then the vector width cannot change a
    result. Not done when numba was set up already, when ``NUMBA_CPU_NAME`` or
    ``NUMBA_CPU_FEATURES`` is set, or with ``NOC_LLM_WIDE_VECTORS=0``.
    """
    import llvmlite.binding as ll  # type: ignore[import-untyped]
    from numba.core import codegen, registry

    cfg = numba.config
    if os.environ.get("NOC_LLM_WIDE_VECTORS", "1").strip() in ("0", "false", "no"):
        return False
    if cfg.CPU_NAME is not None or cfg.CPU_FEATURES is not None:
        return False
    if "_toplevel_target_context" in vars(registry.cpu_target):  # numba already set up
        return False
    try:
        host = ll.get_host_cpu_features()
    except RuntimeError:
        return False
    if not (cfg.ENABLE_AVX and host.get("avx512f") and host.get("evex512", True)):
        return False
    cfg.CPU_FEATURES = codegen.get_host_cpu_features() + ",-prefer-256-bit"
    return True


#: Whether this process compiles numba code with 512-bit vectors (see _prefer_wide_vectors).
WIDE_VECTORS = _prefer_wide_vectors()


def _kernel(*, parallel: bool = False, inline: bool = False) -> Callable[[_F], _F]:
    """``numba.njit`` with the on-disk cache, strict IEEE arithmetic (no ``fastmath``: the
    summation order is part of the numerics), typed for mypy. ``inline``: a part of other
    kernels, inlined into each caller's numba IR (``inline="always"``), so that it compiles
    as if written there, loops and ``prange`` included."""

    def wrap(f: _F) -> _F:
        how = "always" if inline else "never"
        return cast(_F, numba.njit(parallel=parallel, cache=True, inline=how)(f))

    return wrap


def typed_list(items: list[Any]) -> Any:
    """numba's typed list of ``items`` (arrays of one type and shape rank: the kernels' list
    arguments). Imported by name: ``numba.typed`` ships type hints that would make mypy read
    the rest of numba, which has none."""
    return importlib.import_module("numba.typed").List(items)
