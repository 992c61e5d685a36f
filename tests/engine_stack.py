"""The real serving stack the engine tests run against: llama.cpp's llama-server, a relay in
front of each (the ground truth of which engine served what), and vLLM Router over the relays.

`Engines` is tests/engines/up.sh and down.sh seen from Python: the engines' and relays' URLs,
what each relay logged, and the engines' own Prometheus counters. `Router` is one vLLM Router
process (`vllm-router` from PyPI) with one policy, on free loopback ports, ready once its own
/health answers (it checks its workers before it listens).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from runs import free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "engines"
ROUTER = str(Path(sys.executable).with_name("vllm-router"))  # from the test extra
ENGINE_HEADER = "x-engine"  # what the relays add


def scrape(url: str) -> dict[str, float]:
    """A Prometheus text endpoint's samples, `name{label="value",...}` -> value."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


@dataclass(frozen=True)
class Engines:
    directory: Path  # up.sh's state: the model, logs, the relays' request logs

    @classmethod
    def up(cls, directory: Path, count: int, *flags: str, slots: int = 1) -> Engines:
        """Run up.sh (which builds llama-server first if the cache lacks it)."""
        env = os.environ | {
            "DAGPERF_ENGINES_DIR": str(directory),
            "ENGINE_SLOTS": str(slots),
            "PYTHON": sys.executable,
        }
        done = subprocess.run(
            [str(SCRIPTS / "up.sh"), str(count), *flags],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"tests/engines/up.sh failed ({done.returncode}):\n{done.stderr}")
        return cls(Path(done.stdout.strip().splitlines()[-1]))

    def down(self) -> None:
        env = os.environ | {"DAGPERF_ENGINES_DIR": str(self.directory)}
        subprocess.run([str(SCRIPTS / "down.sh")], env=env, check=True, capture_output=True)

    def _lines(self, name: str) -> list[str]:
        return (self.directory / name).read_text().split()

    @property
    def urls(self) -> list[str]:
        return self._lines("engine-urls")

    @property
    def relays(self) -> list[str]:
        return self._lines("relay-urls")

    @property
    def metrics_urls(self) -> list[str]:
        return self._lines("metrics-urls")

    def requests(self) -> list[dict[str, Any]]:
        """Every request the relays passed on, as they logged it on arrival."""
        lines: list[dict[str, Any]] = []
        for log in sorted(self.directory.glob("engine-*.requests.jsonl")):
            for text in log.read_text().splitlines():
                line = json.loads(text)
                if line["event"] == "received":
                    lines.append(line)
        return lines

    def served_by(self) -> dict[str, str]:
        """X-Request-ID -> the engine that received the request."""
        served = {}
        for line in self.requests():
            request_id = line["headers"].get("x-request-id")
            if request_id is not None:
                served[request_id] = line["engine"]
        return served

    def counters(self, *engines: int) -> Counter[str]:
        """The engines' own llamacpp: counters, summed over these engines (default: all)."""
        total: Counter[str] = Counter()
        urls = self.metrics_urls
        for url in [urls[i] for i in engines] if engines else urls:
            for name, value in scrape(url).items():
                if name.startswith("llamacpp:") and name.endswith("_total"):
                    total[name] += value
        return total

    def post(self, engine: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request straight to one engine, its JSON answer."""
        request = urllib.request.Request(
            self.urls[engine] + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer


@dataclass
class Router:
    process: subprocess.Popen[bytes]
    url: str
    metrics_url: str
    policy: str
    log: Path

    @classmethod
    def start(cls, policy: str, workers: list[str], log: Path, timeout: float = 120) -> Router:
        port, metrics_port = free_port(), free_port()
        command = [ROUTER, "--host", "127.0.0.1", "--port", str(port), "--policy", policy]
        command += ["--worker-urls", *workers]
        command += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        router = cls(
            process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics",
            policy, log,
        )  # fmt: skip
        router._wait_ready(timeout)
        return router

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm-router exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)  # polling a condition, not waiting out a race
        self.stop()
        raise RuntimeError(f"vllm-router not ready in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def processed(self) -> Counter[str]:
        """The router's requests per worker (`vllm_router_processed_requests_total`)."""
        counts: Counter[str] = Counter()
        for name, value in scrape(self.metrics_url).items():
            if name.startswith("vllm_router_processed_requests_total{"):
                worker = name.split('worker="', 1)[1].split('"', 1)[0]
                counts[worker] += int(value)
        return counts

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
