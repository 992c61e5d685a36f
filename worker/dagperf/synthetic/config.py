"""The session config file (`--session-config`): what synthetic sessions look like, and a seed.

    seed: 7
    num_sessions: 200
    session_graph:
      type: branching
      num_layers_generator: {type: fixed, value: 4}
      layer_width_generator: {type: uniform, min: 1, max: 3}
      fan_out_generator: {type: fixed, value: 2}
      fan_in_generator: {type: fixed, value: 1}
    prompt:
      input_length: {type: zipf, min: 64, max: 2048, theta: 1.1}
      shared_prefix_ratio: 0.5

YAML or JSON (a JSON document is YAML). Every model forbids unknown fields and is strict (no
"3" for 3), so a typo fails loudly instead of silently running another benchmark. A bad file
raises `ConfigError` with one line per problem, each naming the file and the field's path as
written in it (`session_graph.fan_in_generator.value: ...`): the tags pydantic puts in its paths
for discriminated unions are dropped, since they are not in the file.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dagperf.dataset.specs import REFUSED_CONTEXT_MODE, ContextMode
from dagperf.synthetic.distributions import Count, Duration, Fixed
from dagperf.synthetic.outcomes import ConfigError, LmevalSource, TraceSource
from dagperf.synthetic.veeksha import from_veeksha, is_veeksha


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SingleRequestGraph(_Model):
    """Sessions of one request each: independent calls."""

    type: Literal["single_request"] = "single_request"


class LinearGraph(_Model):
    """A chat: each turn waits for the previous one, then a think time."""

    type: Literal["linear"] = "linear"
    num_request_generator: Count = Field(description="Turns per session.")
    request_wait_generator: Duration = Field(
        default=Fixed(value=0), description="Think time before each turn after the first (s)."
    )
    inherit_history: bool = Field(
        default=True, description="Each turn continues the previous turn's context and reply."
    )


class BranchingGraph(_Model):
    """Layers of requests: fan-out to parallel work, fan-in to merge it, skips across layers."""

    type: Literal["branching"] = "branching"
    num_layers_generator: Count = Field(description="Layers per session.")
    layer_width_generator: Count = Field(description="Nodes per layer, drawn for each layer.")
    fan_out_generator: Count = Field(description="Least children of a node before the last layer.")
    fan_in_generator: Count = Field(description="Least parents of a node after layer 0.")
    connection_dist_generator: Count = Field(
        default=Fixed(value=1), description="Layers an edge spans; 1 joins adjacent layers only."
    )
    request_wait_generator: Duration = Field(
        default=Fixed(value=0), description="Wait after a node's last parent finished (s)."
    )
    single_root: bool = Field(default=False, description="Layer 0 has exactly one node.")
    inherit_history: bool = Field(
        default=True, description="One parent of each node, drawn at random, gives its context."
    )


SessionGraph = Annotated[
    SingleRequestGraph | LinearGraph | BranchingGraph, Field(discriminator="type")
]


class PromptConfig(_Model):
    """What each request sends: its own new text (the history it continues comes on top)."""

    input_length: Count = Field(
        default=Fixed(value=128), description="Tokens of each node's own prompt text."
    )
    output_length: Count = Field(default=Fixed(value=64), description="max_tokens of each request.")
    shared_prefix_ratio: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="The fraction of each root's prompt that is one prefix shared by every "
        "session (rounded to whole tokens), for prefix-cache tests.",
    )
    ignore_eos: bool = Field(
        default=False, description='Send {"ignore_eos": true}, so replies run to max_tokens.'
    )


class SessionConfig(_Model):
    """A whole synthetic workload: the same config and seed give the same sessions."""

    seed: int = Field(default=0, description="Seeds every draw; the same seed, the same sessions.")
    num_sessions: int = Field(default=100, ge=1, le=10_000_000, description="Sessions to generate.")
    session_graph: SessionGraph = Field(description="The shape of each session.")
    prompt: PromptConfig = Field(default=PromptConfig(), description="Prompt text and lengths.")
    context_mode: ContextMode | None = Field(
        default=None, strict=False, description="How history is built; see ContextMode."
    )
    cancel_session_on_failure: bool | None = Field(
        default=None,
        description="Whether a failed request cancels the rest of its session (Veeksha's "
        "traffic_scheduler.cancel_session_on_failure); --cancel-session-on-failure wins. "
        "Default: the flag's default, off.",
    )

    @field_validator("context_mode")
    @classmethod
    def _supported(cls, mode: ContextMode | None) -> ContextMode | None:
        if mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
            raise ValueError(REFUSED_CONTEXT_MODE)
        return mode


def load_session_config(path: str | Path) -> SessionConfig | TraceSource | LmevalSource:
    """Read and validate a YAML or JSON session config file (or a Veeksha config, whose trace
    file or task directories, if it names them, are looked for beside it too)."""
    source = str(path)
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(source, [f"cannot read the session config: {reason}"]) from None
    return read_session_config(text, source, Path(path).parent)


def read_session_config(
    text: str | bytes, source: str, base: Path | None = None
) -> SessionConfig | TraceSource | LmevalSource:
    """Validate a YAML or JSON session config held in memory (a ConfigMap's key, say); a
    Veeksha config's `session_generator` is read as Veeksha writes it (`veeksha`)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(source, [f"cannot read the session config: {e}"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.MarkedYAMLError as e:
        raise ConfigError(source, [_yaml_problem(e)]) from None
    except yaml.YAMLError as e:
        raise ConfigError(source, [f"invalid YAML: {e}"]) from None
    if is_veeksha(data):
        data = from_veeksha(data, source, base)
        if isinstance(data, TraceSource | LmevalSource):
            return data
    return parse_session_config(data, source)


def parse_session_config(data: Any, source: str = "<session config>") -> SessionConfig:
    """Validate an already parsed document; `source` names it in messages."""
    if data is None:
        raise ConfigError(source, ["empty: a session config needs at least a session_graph"])
    if not isinstance(data, dict):
        raise ConfigError(source, [f"expected a mapping of settings, got {_kind(data)}"])
    try:
        return SessionConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, [_describe(err, data) for err in e.errors()]) from None


def _describe(err: Any, data: Any) -> str:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    path = _path(err["loc"], data)
    if "at" in ctx:
        path = f"{path}.{ctx['at']}" if path else ctx["at"]
    if kind == "missing":
        message = "required"
    elif kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "union_tag_invalid":
        message = f"unknown type '{ctx['tag']}': expected one of {ctx['expected_tags']}"
        path = f"{path}.type"
    elif kind == "union_tag_not_found":
        message = "required: the type decides the other fields"
        path = f"{path}.type"
    elif kind in ("model_attributes_type", "model_type", "dict_type"):
        message = f"expected a mapping, got {_kind(err.get('input'))}"
    else:
        message = err["msg"].removeprefix("Value error, ")
    return f"{path}: {message}" if path else message


def _path(loc: tuple[Any, ...], data: Any) -> str:
    """The path as written in the file: follows the document, dropping the union tags pydantic
    inserts (`session_graph.branching.fan_in_generator` is `session_graph.fan_in_generator`)."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part not in node and node.get("type") == part:
            continue  # a union tag: the member pydantic tried, not a key of the document
        is_index = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        node = node[part] if is_index or (isinstance(node, dict) and part in node) else None
        parts.append(str(part))
    return ".".join(parts)


def _kind(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", type(None): "nothing"}
    return names.get(type(value), "a number")


def _yaml_problem(e: yaml.MarkedYAMLError) -> str:
    mark = e.problem_mark or e.context_mark
    what = e.problem or "syntax error"
    if e.context:
        started = e.context_mark
        on = f" on line {started.line + 1}" if started and started is not mark else ""
        what += f" ({e.context}{on})"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return f"{where}invalid YAML: {what}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error: YAML would keep the
    last silently, and a benchmark would run with a setting its author thinks they replaced."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader refuses it, with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} given twice in one mapping",
                    problem_mark=key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
