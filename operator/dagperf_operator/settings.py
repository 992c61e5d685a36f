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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


@dataclass(frozen=True)
class OperatorSettings:
    image: str = "dagperf:latest"
    image_pull_policy: str = "IfNotPresent"
    scheduler_resources: dict[str, Any] = field(default_factory=lambda: DEFAULT_RESOURCES)
    worker_resources: dict[str, Any] = field(default_factory=lambda: DEFAULT_RESOURCES)
    zmq_port: int = 5555
    metrics_port: int = 9090
    # How the operator reaches a scheduler's HTTP port: its Service's cluster DNS name.
    status_url: str = "http://{service}.{namespace}.svc:{port}"
    poll_interval_s: float = 5.0
    metrics_linger_s: float = 15.0  # the scheduler keeps /metrics up this long after its run
    run_as_user: int = 10001
    network_policy: bool = True  # admit only the Benchmark's workers to its scheduler's port
    control_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def control_token(self, uid: str) -> str:
        """The control token of the Benchmark with this uid."""
        return hmac.new(self.control_key, uid.encode(), hashlib.sha256).hexdigest()

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorSettings:
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for name, kind in (
            ("image", str),
            ("image_pull_policy", str),
            ("zmq_port", int),
            ("metrics_port", int),
            ("status_url", str),
            ("poll_interval_s", float),
            ("metrics_linger_s", float),
            ("run_as_user", int),
        ):
            raw = env.get(f"DAGPERF_{name.upper()}")
            if raw is not None:
                values[name] = _parsed(name, raw, kind)
        for name in ("scheduler_resources", "worker_resources"):
            raw = env.get(f"DAGPERF_{name.upper()}")
            if raw:
                values[name] = _parsed(name, raw, json.loads)
        if raw := env.get("DAGPERF_NETWORK_POLICY"):
            values["network_policy"] = raw.strip().lower() in ("1", "true", "yes")
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
    try:
        return kind(raw)
    except ValueError:
        what = "JSON" if kind is json.loads else kind.__name__
        raise SettingsError(f"DAGPERF_{name.upper()}={raw!r} is not a valid {what}") from None
