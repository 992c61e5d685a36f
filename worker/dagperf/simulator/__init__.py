"""The built-in simulated LLM: serve it in-process (`running_simulator`) or as a command.

The server and aiohttp load on first use of a name that needs them, not with the package: every
dagperf process reads `SimConfig` for its command line, and a worker never serves.
"""

from __future__ import annotations

import importlib
from typing import Any

from dagperf.simulator.config import SimConfig
from dagperf.simulator.prefix_cache import PrefixCache

__all__ = [
    "PrefixCache",
    "RunningSimulator",
    "SimConfig",
    "SimRecord",
    "Simulator",
    "running_simulator",
    "serve_simulator",
]

_LAZY = {
    "RunningSimulator": "serving",
    "running_simulator": "serving",
    "serve_simulator": "serving",
    "SimRecord": "server",
    "Simulator": "server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
