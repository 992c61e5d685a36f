"""A Veeksha benchmark config, taken as is by `--session-config`: its `session_generator`.

    seed: 42
    session_generator:
      type: synthetic                  # or: trace
      session_graph: {type: linear, num_request_generator: {type: uniform, min: 2, max: 6}}
      channels: [{type: text, body_length_generator: {type: uniform, min: 64, max: 512}}]
      output_spec: {text: {output_length_generator: {type: fixed, value: 128}}}
    runtime: {max_sessions: 200}

`synthetic` becomes dagperf's own session config: the session graph as written (the same
generators), the text channel's body length as each prompt's length and its shared-prefix ratio,
the text output length as each request's token limit; a length Veeksha would default is given
Veeksha's default (uniform 6 to 12 tokens), the seed Veeksha's (42). `trace` reads `trace_file`
with its `flavor` as a dataset type: timed_synthetic_session, request_log,
untimed_content_multi_turn (with its keys), shared_prefix (with its `block_size`) and rag (with
its `num_documents`, shuffled by the config's `seed`); `wrap_mode` is dagperf's default (roots run
again while a stop condition wants more); a `corpus_file` is dagperf's own corpus.
`runtime.max_sessions` is the number of sessions of the synthetic generator.

`lmeval` names lm-eval-harness `tasks` (Veeksha's default: hellaswag) and `num_fewshot`
(default 1); `runtime.max_sessions` is how many documents (Veeksha's default 25, -1 for all),
since Veeksha gives lmeval no limit of its own. Veeksha looks tasks up among lm-eval's own only;
`include_path` (dagperf's field, not Veeksha's: a directory or a list of them, relative ones
from the working directory, else beside the config) adds directories of task YAMLs, such as a
task whose dataset is a local file. The sessions are built by `dagperf.synthetic.lmeval`.

What dagperf takes from its own flags (traffic_scheduler, client, server, evaluators, ...) is
named in a warning and left out, but for `traffic_scheduler.cancel_session_on_failure`: a failed
request cancels the rest of its session unless it says false (Veeksha's default is true), and
--[no-]cancel-session-on-failure still wins. What dagperf cannot do yet is refused with its
path: other channels than text, a shared-prefix probability below 1, the flavours dagperf does
not read (sharegpt, audio, seed_tts_text: speech workloads).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from dagperf.dataset.formats.columns import BLOCK_SIZE, Keys
from dagperf.synthetic.outcomes import ConfigError, LmevalSource, TraceReader, TraceSource

log = logging.getLogger("dagperf")

FLAG_SECTIONS = frozenset(
    {
        "output_dir",
        "traffic_scheduler",
        "evaluators",
        "client",
        "server",
        "trace_recorder",
        "wandb",
        "mode",
        "metrics",
        "dashboard",
    }
)
OWN_SECTIONS = frozenset({"seed", "session_generator", "runtime"})
VEEKSHA_LENGTH = {"type": "uniform", "min": 6, "max": 12}  # Veeksha's default length generator
CHANNEL_FIELDS = {
    "type",
    "body_length_generator",
    "shared_prefix_ratio",
    "shared_prefix_probability",
}
KEY_FIELDS = {
    "conversation_column": "column",
    "role_key": "role",
    "content_key": "content",
    "user_role_value": "user",
    "assistant_role_value": "assistant",
}
FLAVOR_FIELDS = {  # each flavour dagperf reads, and the options of its Veeksha config
    "timed_synthetic_session": {"corpus_file", "page_size"},
    "request_log": {"corpus_file", "page_size"},
    "untimed_content_multi_turn": set(KEY_FIELDS),
    "shared_prefix": {"corpus_file", "block_size"},
    "rag": {"num_documents"},
}
VEEKSHA_SEED = 42


def is_veeksha(data: Any) -> bool:
    return isinstance(data, dict) and "session_generator" in data


def from_veeksha(
    data: dict[str, Any], source: str, base: Path | None
) -> dict[str, Any] | TraceSource | LmevalSource:
    """dagperf's session config for a Veeksha config, or the trace or lm-eval tasks it names."""
    unknown = sorted(set(data) - FLAG_SECTIONS - OWN_SECTIONS)
    if unknown:
        raise ConfigError(source, [f"{key}: unknown field" for key in unknown])
    if ignored := sorted(set(data) & FLAG_SECTIONS):
        but = " (but traffic_scheduler.cancel_session_on_failure)" * ("traffic_scheduler" in data)
        log.warning(
            "%s: %s left out%s: dagperf takes them from its flags (--url, --concurrency, "
            "--request-rate, ...)",
            source,
            ", ".join(ignored),
            but,
        )
    cancel = _cancel_on_failure(data.get("traffic_scheduler") or {}, source)
    generator = _mapping(data["session_generator"], "session_generator", source)
    kind = generator.get("type")
    if kind == "synthetic":
        return _synthetic(generator, data, source) | {"cancel_session_on_failure": cancel}
    if kind == "trace":
        return replace(_trace(generator, data, source, base), cancel_session_on_failure=cancel)
    if kind == "lmeval":
        return replace(_lmeval(generator, data, source, base), cancel_session_on_failure=cancel)
    raise ConfigError(
        source,
        [
            f"session_generator.type: unknown type {kind!r}: expected one of "
            "synthetic, trace, lmeval"
        ],
    )


def _mapping(value: Any, path: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(source, [f"{path}: expected a mapping"])
    return value


def _cancel_on_failure(traffic: Any, source: str) -> bool:
    """Whether a failed request cancels the rest of its session: Veeksha's default is true."""
    value = _mapping(traffic, "traffic_scheduler", source).get("cancel_session_on_failure", True)
    if not isinstance(value, bool):
        raise ConfigError(
            source,
            [f"traffic_scheduler.cancel_session_on_failure: expected true or false, got {value!r}"],
        )
    return value


def _only(mapping: dict[str, Any], allowed: set[str], path: str, source: str) -> None:
    if unknown := sorted(set(mapping) - allowed):
        raise ConfigError(source, [f"{path}.{key}: unknown field" for key in unknown])


def _synthetic(gen: dict[str, Any], data: dict[str, Any], source: str) -> dict[str, Any]:
    _only(gen, {"type", "session_graph", "channels", "output_spec"}, "session_generator", source)
    prompt: dict[str, Any] = {"input_length": VEEKSHA_LENGTH, "output_length": VEEKSHA_LENGTH}
    channels = gen.get("channels", [{"type": "text"}])
    if not isinstance(channels, list) or not channels:
        raise ConfigError(source, ["session_generator.channels: expected a list of channels"])
    for i, channel in enumerate(channels):
        path = f"session_generator.channels[{i}]"
        channel = _mapping(channel, path, source)
        if channel.get("type") != "text":
            raise ConfigError(source, [f"{path}.type: only text is supported"])
        fields = {
            "type",
            "body_length_generator",
            "shared_prefix_ratio",
            "shared_prefix_probability",
        }
        _only(channel, fields, path, source)
        if channel.get("shared_prefix_probability", 1.0) != 1.0:
            raise ConfigError(
                source,
                [
                    f"{path}.shared_prefix_probability: only 1.0 (every root "
                    "shares the prefix) is supported"
                ],
            )
        prompt["input_length"] = channel.get("body_length_generator", VEEKSHA_LENGTH)
        if "shared_prefix_ratio" in channel:
            prompt["shared_prefix_ratio"] = channel["shared_prefix_ratio"]
    output = _mapping(gen.get("output_spec", {}), "session_generator.output_spec", source)
    _only(output, {"text"}, "session_generator.output_spec", source)
    text = _mapping(output.get("text") or {}, "session_generator.output_spec.text", source)
    _only(text, {"output_length_generator"}, "session_generator.output_spec.text", source)
    prompt["output_length"] = text.get("output_length_generator", VEEKSHA_LENGTH)
    if "session_graph" not in gen:
        raise ConfigError(source, ["session_generator.session_graph: required"])
    out = {
        "seed": data.get("seed", VEEKSHA_SEED),
        "session_graph": gen["session_graph"],
        "prompt": prompt,
    }
    runtime = _mapping(data.get("runtime", {}), "runtime", source)
    if runtime.get("max_sessions") not in (None, -1):
        out["num_sessions"] = runtime["max_sessions"]
    return out


def _trace(
    gen: dict[str, Any], data: dict[str, Any], source: str, base: Path | None
) -> TraceSource:
    _only(gen, {"type", "trace_file", "flavor", "wrap_mode"}, "session_generator", source)
    flavor = _mapping(
        gen.get("flavor", {"type": "timed_synthetic_session"}), "session_generator.flavor", source
    )
    kind = flavor.get("type")
    if kind not in FLAVOR_FIELDS:
        raise ConfigError(
            source,
            [
                f"session_generator.flavor.type: {kind!r} is not supported; "
                f"dagperf reads {', '.join(FLAVOR_FIELDS)}"
            ],
        )
    _only(flavor, {"type", *FLAVOR_FIELDS[kind]}, "session_generator.flavor", source)
    name = gen.get("trace_file")
    if not isinstance(name, str) or not name:
        raise ConfigError(source, ["session_generator.trace_file: required"])
    return TraceSource(_beside(Path(name), base), kind, _reader(kind, flavor, data, source))


def _reader(
    kind: str, flavor: dict[str, Any], data: dict[str, Any], source: str
) -> TraceReader | None:
    """The flavour's reader given its options, or None when the dataset type reads it as is."""
    if kind == "untimed_content_multi_turn":
        from dagperf.dataset.formats.untimed_content_multi_turn import read_conversations

        keys = Keys(**{KEY_FIELDS[k]: str(v) for k, v in flavor.items() if k in KEY_FIELDS})
        return functools.partial(read_conversations, keys=keys)
    if kind == "shared_prefix":
        from dagperf.dataset.formats.shared_prefix import read_shared_prefix
        from dagperf.dataset.limits import MAX_PROMPT_TOKENS

        size = _whole(flavor.get("block_size", BLOCK_SIZE), "flavor.block_size", source)
        if not 1 <= size <= MAX_PROMPT_TOKENS:
            raise ConfigError(
                source,
                [
                    "session_generator.flavor.block_size: must be between 1 "
                    f"and {MAX_PROMPT_TOKENS:,}, got {size:,}"
                ],
            )
        return functools.partial(read_shared_prefix, block_size=size)
    if kind == "rag":
        from dagperf.dataset.formats.rag import NUM_DOCUMENTS, read_rag

        count = _whole(flavor.get("num_documents", NUM_DOCUMENTS), "flavor.num_documents", source)
        seed = _whole(data.get("seed", VEEKSHA_SEED), "seed", source, "")
        return functools.partial(read_rag, num_documents=count, seed=seed)
    return None  # dagperf's own corpus stands in for a corpus_file


def _whole(value: Any, path: str, source: str, within: str = "session_generator.") -> int:
    if not _is_whole(value):
        raise ConfigError(source, [f"{within}{path}: expected a whole number, got {value!r}"])
    return int(value)


LMEVAL_FIELDS = {"type", "tasks", "num_fewshot", "include_path"}
LMEVAL_MAX_SESSIONS = 25  # Veeksha's runtime.max_sessions when a config sets none


def _lmeval(
    gen: dict[str, Any], data: dict[str, Any], source: str, base: Path | None
) -> LmevalSource:
    """The lmeval generator's fields, every problem named in one pass; the tasks are loaded
    later, by `dagperf.synthetic.lmeval`, where lm_eval is imported."""
    _only(gen, LMEVAL_FIELDS, "session_generator", source)
    problems = []
    tasks = gen.get("tasks", ["hellaswag"])
    if not isinstance(tasks, list) or not tasks or not all(_named(t) for t in tasks):
        problems.append("session_generator.tasks: expected a list of task names")
    fewshot = gen.get("num_fewshot", 1)
    if not _is_whole(fewshot) or fewshot < 0:
        problems.append("session_generator.num_fewshot: expected a whole number, 0 or more")
    paths = gen.get("include_path", [])
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or not all(_named(p) for p in paths):
        problems.append("session_generator.include_path: expected a directory or a list of them")
        paths = []
    directories = tuple(_beside(Path(p), base) for p in paths)
    problems += [
        f"session_generator.include_path: no such directory: {d}"
        for d in directories
        if not d.is_dir()
    ]
    runtime = _mapping(data.get("runtime", {}), "runtime", source)
    limit = runtime.get("max_sessions", LMEVAL_MAX_SESSIONS)
    if not _is_whole(limit) or limit == 0 or limit < -1:
        problems.append("runtime.max_sessions: expected a number of documents, or -1 for all")
    seed = data.get("seed", VEEKSHA_SEED)
    if not _is_whole(seed):
        problems.append("seed: expected a whole number")
    if problems:
        raise ConfigError(source, problems)
    return LmevalSource(source, tuple(tasks), fewshot, directories, limit, seed)


def _named(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _beside(path: Path, base: Path | None) -> Path:
    """A relative path as Veeksha reads paths (from the working directory), else beside the
    config."""
    if path.is_absolute() or path.exists() or base is None:
        return path
    return base / path
