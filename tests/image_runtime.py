"""Podman as the tests use it, with the settings tests/image/build.sh builds with (runc,
cgroupfs, ulimits: tests/image/containers.conf). A pod's containers run from the image on the
real node (tests/test_real_node.py), by the kubelet."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD_SH = ROOT / "tests" / "image" / "build.sh"
CHART = ROOT / "charts" / "dagperf"
ENV = {"CONTAINERS_CONF": str(ROOT / "tests" / "image" / "containers.conf")}


def image_name() -> str:
    """The image's one name: what the chart runs by default (its image.repository and, with no
    tag set, its appVersion). Everything else that names the image is held to this."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def podman(*args: str, timeout: float = 300, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        env=os.environ | ENV | kwargs.pop("env", {}),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def build(output: Path) -> subprocess.CompletedProcess[str]:
    """tests/image/build.sh, with the SBOM and build record written to `output`."""
    return subprocess.run(
        ["bash", str(BUILD_SH), str(output)], capture_output=True, text=True, timeout=3600
    )
