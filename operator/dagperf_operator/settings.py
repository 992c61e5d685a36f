"""The operator's own settings, from its environment (the Helm chart's values set them).

The control key is the operator's one secret: each Benchmark's control token (what POST /stop
on its scheduler needs) is derived from it and the Benchmark's uid, so the operator can stop a
run it launched before a restart without the right to read Secrets. The chart keeps the key in
a Secret of its own; without one (`DAGPERF_CONTROL_KEY_FILE` unset) a key is made per process,
and a Benchmark launched before a restart is then suspended by deleting its scheduler.

Defaults for benchmark pods live here, so a Benchmark need not repeat them; the ports and the
address the operator uses to read a scheduler's /status are here too, so a test harness that
runs the pods as local processes can point the operator at 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dagperf import __version__

DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


def _about(chart: str | None, doc: str) -> dict[str, Any]:
    """A setting's metadata: the chart's values key that sets it (None: not a chart value, and
    `doc` says why) and what it does. The chart passes it as `DAGPERF_<NAME>`."""
    return {"chart": chart, "doc": doc}


@dataclass(frozen=True)
class OperatorSettings:
    image: str = field(
        default=f"dagperf:{__version__}",
        metadata=_about(
            "image.repository, image.tag",
            "The image of benchmark pods (the operator's own): repository and tag (default: the "
            "chart's appVersion).",
        ),
    )
    image_pull_policy: str = field(
        default="IfNotPresent",
        metadata=_about("image.pullPolicy", "Pull policy of benchmark pods."),
    )
    scheduler_resources: dict[str, Any] = field(
        default_factory=lambda: DEFAULT_RESOURCES,
        metadata=_about(
            "benchmarkDefaults.scheduler.resources",
            "Resources of a scheduler pod, unless its Benchmark sets them.",
        ),
    )
    worker_resources: dict[str, Any] = field(
        default_factory=lambda: DEFAULT_RESOURCES,
        metadata=_about(
            "benchmarkDefaults.worker.resources",
            "Resources of each worker pod, unless its Benchmark sets them.",
        ),
    )
    zmq_port: int = field(
        default=5555, metadata=_about("benchmarkDefaults.zmqPort", "The scheduler's ZeroMQ port.")
    )
    metrics_port: int = field(
        default=9090,
        metadata=_about(
            "benchmarkDefaults.metricsPort", "The scheduler's /metrics and /status port."
        ),
    )
    status_url: str = field(
        default="http://{service}.{namespace}.svc:{port}",
        metadata=_about(
            None,
            "How the operator reaches a scheduler's /status: its Service's cluster DNS name "
            "(a test harness running pods as local processes points it at 127.0.0.1).",
        ),
    )
    poll_interval_s: float = field(
        default=5.0,
        metadata=_about(
            "operator.pollIntervalSeconds",
            "How often a running Benchmark's status is refreshed from its scheduler, in seconds.",
        ),
    )
    metrics_linger_s: float = field(
        default=15.0,
        metadata=_about(
            "benchmarkDefaults.metricsLingerSeconds",
            "How long a finished scheduler keeps serving /metrics, for a last scrape, in seconds.",
        ),
    )
    run_as_user: int = field(
        default=10001,
        metadata=_about(
            None, "The image's non-root user, which every pod runs as (the chart's too)."
        ),
    )
    network_policy: bool = field(
        default=True,
        metadata=_about(
            "benchmarkDefaults.networkPolicy",
            "A NetworkPolicy per Benchmark admitting only its workers to its scheduler's "
            "ZeroMQ port.",
        ),
    )
    control_key: bytes = field(
        default_factory=lambda: secrets.token_bytes(32),
        repr=False,
        metadata=_about(None, "Read from DAGPERF_CONTROL_KEY_FILE, a file: the chart's Secret."),
    )

    def control_token(self, uid: str) -> str:
        """The control token of the Benchmark with this uid."""
        return hmac.new(self.control_key, uid.encode(), hashlib.sha256).hexdigest()

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorSettings:
        """Every setting from its `DAGPERF_<NAME>` variable where set, parsed by its type."""
        env = dict(os.environ if env is None else env)
        types = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for setting in fields(cls):
            raw = env.get(f"DAGPERF_{setting.name.upper()}")
            if setting.name != "control_key" and raw:
                values[setting.name] = _parsed(setting.name, raw, types[setting.name])
        if path := env.get("DAGPERF_CONTROL_KEY_FILE"):
            values["control_key"] = _control_key(path)
        return cls(**values)


class SettingsError(ValueError):
    pass


def _control_key(path: str) -> bytes:
    try:
        key = Path(path).read_bytes().strip()
    except OSError as e:
        raise SettingsError(f"DAGPERF_CONTROL_KEY_FILE={path}: {e.strerror}") from None
    if len(key) < 16:
        raise SettingsError(f"DAGPERF_CONTROL_KEY_FILE={path}: a key of 16 bytes or more")
    return key


def _parsed(name: str, raw: str, kind: Any) -> Any:
    if kind is bool:
        return raw.strip().lower() in ("1", "true", "yes")
    parse = json.loads if typing.get_origin(kind) is dict else kind
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if not isinstance(value, typing.get_origin(kind) or kind):
        what = "JSON object" if parse is json.loads else kind.__name__
        raise SettingsError(f"DAGPERF_{name.upper()}={raw!r} is not a valid {what}")
    return value
