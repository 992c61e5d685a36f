"""Synthetic workloads: sessions drawn from a config of distributions, and the text they send.

`load_session_config` reads a `--session-config` file into a `SessionConfig`; `generate_sessions`
turns it into `SessionSpec`s for `dagperf.graph.sessions.compile_sessions`. Layers, lowest first:
`distributions` (samplers), `config` (the file's models), `graphs` (session shapes), `generate`
(shapes plus prompts); `prompts` supplies text of a given length in tokens.
"""

from dagperf.synthetic.config import (
    BranchingGraph,
    LinearGraph,
    PromptConfig,
    SessionConfig,
    SingleRequestGraph,
    load_session_config,
    parse_session_config,
    read_session_config,
)
from dagperf.synthetic.generate import generate_sessions
from dagperf.synthetic.outcomes import ConfigError

__all__ = [
    "BranchingGraph",
    "ConfigError",
    "LinearGraph",
    "PromptConfig",
    "SessionConfig",
    "SingleRequestGraph",
    "generate_sessions",
    "load_session_config",
    "parse_session_config",
    "read_session_config",
]
