"""What is checked of a Benchmark's dataset before anything is launched, from each source:

- a ConfigMap: read through the API and parsed with the CLI's loader, and the Benchmark's load
  resolved against it as the CLI resolves it (`dagperf.load`): a load the CLI would refuse on
  this dataset, such as a fixed schedule on one without timestamps, is refused here with the
  CLI's message, not after the pods start;
- a URL: fetched by streaming to a temporary file, its SHA-256 checked, then parsed and its
  load resolved the same way (the scheduler pod's init container fetches and checks it again:
  the file could change in between);
- a claim: the operator mounts no volume, so it checks that the claim exists (a pod waiting on
  a missing claim would wait forever); the scheduler reads the file when it starts and, if it
  cannot run it, fails the Benchmark with the problems.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dagperf.dataset import DatasetError
from dagperf.fetch import FetchError, local_copy, shown
from dagperf.graph import RequestGraph
from dagperf.load import LoadError, resolve_load
from dagperf.sources import SESSION_CONFIG, load_graph, parse_graph, parse_synthetic_graph
from dagperf.vocabulary.config import LoadConfig
from dagperf_operator.kube import Kube
from dagperf_operator.spec import BenchmarkSpec, as_options
from dagperf_operator.status import dataset_problems_message


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome: `reason` is None when the dataset may be run; `key` is where the scheduler
    reads it (a ConfigMap's key, a path on the claim; None for a URL, whose file is named
    after it); `message` says where
    the dataset is, or what is wrong with it."""

    reason: str | None
    message: str
    key: str | None = None


def check_dataset(spec: BenchmarkSpec, namespace: str, kube: Kube) -> Checked:
    dataset = spec.dataset
    if dataset.url is not None:
        return _from_url(spec)
    if dataset.persistent_volume_claim is not None:
        ref = dataset.persistent_volume_claim
        where = f"persistentvolumeclaim/{ref.claim_name}"
        if not kube.claim_exists(namespace, ref.claim_name):
            return Checked("ClaimNotFound", f"{where} does not exist in this namespace")
        return Checked(None, f"{where} path {ref.path} (checked by the scheduler)", ref.path)
    return _from_config_map(spec, namespace, kube)


def _runnable(
    spec: BenchmarkSpec, read: Callable[[], RequestGraph], message: str, key: str | None = None
) -> Checked:
    """The dataset `read` returns, checked as the CLI checks it: its problems, else whether
    the Benchmark's load can run on it."""
    try:
        graph = read()
    except DatasetError as e:
        problems = [p.short() for p in e.problems]
        return Checked("InvalidDataset", dataset_problems_message(problems))
    try:
        resolve_load(as_options(spec.load, LoadConfig), graph)
    except LoadError as e:
        return Checked("InvalidLoad", f"load: {e}")
    return Checked(None, message, key)


def _from_url(spec: BenchmarkSpec) -> Checked:
    ref = spec.dataset.url
    assert ref is not None
    source = shown(ref.url)
    try:
        with local_copy(ref.url, ref.sha256) as path:
            read = functools.partial(_from_file, spec, path, source)
            return _runnable(spec, read, f"url {source} (sha256 checked)")
    except FetchError as e:
        return Checked("FetchFailed", str(e))


def _from_file(spec: BenchmarkSpec, path: Path, source: str) -> RequestGraph:
    if spec.dataset.type == SESSION_CONFIG:
        return parse_synthetic_graph(path.read_bytes(), source)
    return load_graph(path, spec.dataset.type, source)


def _from_bytes(spec: BenchmarkSpec, data: bytes, source: str) -> RequestGraph:
    if spec.dataset.type == SESSION_CONFIG:
        return parse_synthetic_graph(data, source)
    return parse_graph(io.BytesIO(data), source, spec.dataset.type)


def _from_config_map(spec: BenchmarkSpec, namespace: str, kube: Kube) -> Checked:
    ref = spec.dataset.config_map_ref
    assert ref is not None
    files = kube.dataset_files(namespace, ref.name)
    if files is None:
        return Checked(
            "ConfigMapNotFound", f"configmap/{ref.name} does not exist in this namespace"
        )
    key = ref.key
    if key is None:
        if len(files) != 1:
            keys = ", ".join(sorted(files)) or "none"
            message = (
                f"configmap/{ref.name} has {len(files)} keys ({keys}): set dataset.configMapRef.key"
            )
            return Checked("InvalidDataset", message)
        key = next(iter(files))
    if key not in files:
        return Checked("InvalidDataset", f"configmap/{ref.name} has no key {key!r}")
    data, source = files[key], f"configmap/{ref.name}/{key}"
    read = functools.partial(_from_bytes, spec, data, source)
    return _runnable(spec, read, f"configmap/{ref.name} key {key}", key)
