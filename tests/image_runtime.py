"""Podman as the tests use it, with the settings tests/image/build.sh builds with (runc,
cgroupfs, ulimits: tests/image/containers.conf), and a pod's container as the arguments of
`podman run`, the way a kubelet would run it: the pod's user and groups, read-only root, no
capabilities, no privilege escalation, its memory limit, its volumes and environment, and the
node's network (tests/node.py gives each pod a loopback address of its own).

What the kubelet does to a volume for a pod's fsGroup is done here too (`give_to_group`), so a
container running as uid 10001 reads its Secret and writes its emptyDir and claim as it would
in a cluster, and fails where it would fail there.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD_SH = ROOT / "tests" / "image" / "build.sh"
CHART = ROOT / "charts" / "dagperf"
ENV = {"CONTAINERS_CONF": str(ROOT / "tests" / "image" / "containers.conf")}
QUANTITY = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


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


class ContainerConfigError(Exception):
    """What the kubelet reports as CreateContainerConfigError: the pod cannot run as written."""


@dataclass(frozen=True)
class Mount:
    host: Path
    read_only: bool = False


class ImageNotPresent(LookupError):
    """An image the node does not hold (nothing is pulled here): ErrImageNeverPull."""


def run_arguments(
    pod: dict[str, Any],
    container: dict[str, Any],
    command: list[str],
    mounts: dict[str, Mount],
    env: dict[str, str],
    labels: dict[str, str],
) -> tuple[list[str], str]:
    """`podman run` options, image and command for a pod's container (`command`: its command
    and args, expanded), and the image's ID. The environment's values are not among them (a
    Secret's value would show in the process list): podman takes each from its own
    environment, which the caller sets to `env`."""
    spec = pod["spec"]
    image_id, user = image_config(container["image"])
    args = ["--rm", "--pull=never", "--network=host"]
    args += [f"--label={key}={value}" for key, value in labels.items()]
    args += security_options(spec.get("securityContext") or {}, container, user)
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if limit is not None:
        args.append(f"--memory={quantity(limit)}")
    args.append(f"--stop-timeout={spec.get('terminationGracePeriodSeconds', 30)}")
    for path, mount in sorted(mounts.items()):
        args.append(f"--volume={mount.host}:{path}" + (":ro" if mount.read_only else ""))
    args += [f"--env={key}" for key in env]
    if "workingDir" in container:
        args.append(f"--workdir={container['workingDir']}")
    if "command" in container:  # the image's entrypoint and command, replaced
        return [*args, f"--entrypoint={json.dumps(command)}", container["image"]], image_id
    return [*args, container["image"], *command], image_id  # args only: the image's CMD, replaced


def security_options(pod: dict[str, Any], container: dict[str, Any], image_user: str) -> list[str]:
    own = container.get("securityContext") or {}
    merged = {**pod, **own}  # the container's settings win over the pod's
    args = []
    user = merged.get("runAsUser")
    if user is not None:
        group = merged.get("runAsGroup")
        args.append(f"--user={user}" + (f":{group}" if group is not None else ""))
    if merged.get("runAsNonRoot"):
        effective = str(user) if user is not None else image_user.partition(":")[0]
        if not effective.isdigit():
            raise ContainerConfigError(
                f"container has runAsNonRoot and image has non-numeric user ({effective}), "
                "cannot verify user is non-root"
            )
        if int(effective) == 0:
            raise ContainerConfigError("container has runAsNonRoot and image will run as root")
    for group in [pod.get("fsGroup"), *(pod.get("supplementalGroups") or [])]:
        if group is not None:
            args.append(f"--group-add={group}")
    if own.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]  # no /tmp the pod did not mount
    if own.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    if own.get("privileged"):
        args.append("--privileged")
    capabilities = own.get("capabilities") or {}
    args += [f"--cap-drop={c}" for c in capabilities.get("drop") or []]
    args += [f"--cap-add={c}" for c in capabilities.get("add") or []]
    seccomp = (merged.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        args.append("--security-opt=seccomp=unconfined")
    elif seccomp != "RuntimeDefault":
        raise ContainerConfigError(f"seccomp profile {seccomp} is not supported by this node")
    return args


def image_config(image: str) -> tuple[str, str]:
    """An image's ID and the user it runs as (its USER, or '' when it names none)."""
    inspected = podman("image", "inspect", "--format", "{{.Id}} {{.Config.User}}", image)
    if inspected.returncode != 0:
        raise ImageNotPresent(
            f'image "{image}" is not present on this node (nothing is pulled here): '
            + inspected.stderr.strip()
        )
    image_id, _, user = inspected.stdout.strip().partition(" ")
    return image_id, user


def quantity(value: str | int) -> int:
    """A Kubernetes quantity (`512Mi`, `1G`, `1000`) in bytes."""
    found = re.fullmatch(r"(\d+)(\w*)", str(value))
    if found is None or found[2] not in QUANTITY:
        raise ContainerConfigError(f"cannot read the quantity {value!r}")
    return int(found[1]) * QUANTITY[found[2]]


def give_to_group(path: Path, group: int, read_only: bool) -> None:
    """The kubelet's ownership change for a pod's fsGroup: every file and directory of the
    volume gets the group, group read (and write, unless the volume is read-only) permission,
    and directories the set-group-ID bit, so files made in them keep the group."""
    mask = 0o440 if read_only else 0o660
    for each in [path, *path.rglob("*")]:
        if each.is_symlink():
            continue
        os.chown(each, -1, group)
        extra = mask | (stat.S_ISGID | 0o110 if each.is_dir() else 0)
        each.chmod(stat.S_IMODE(each.stat().st_mode) | extra)
