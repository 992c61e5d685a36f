"""What reading a session config can end in besides a config: a problem (`ConfigError`), a
Veeksha trace generator's file to read as a dataset (`TraceSource`), or a Veeksha lmeval
generator's lm-eval-harness tasks (`LmevalSource`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagperf.dataset.specs import TraceDataset

TraceReader = Callable[[Iterable[bytes], str], "TraceDataset"]


@dataclass(frozen=True, slots=True)
class TraceSource:
    """What a Veeksha trace generator names: a file to read as a dataset type, and, when its
    flavour has options (message keys, block size, number of documents), the dataset type's
    reader given them."""

    path: Path
    dataset_type: str
    read: TraceReader | None = None
    cancel_session_on_failure: bool | None = None  # the config's traffic_scheduler says


@dataclass(frozen=True, slots=True)
class LmevalSource:
    """What a Veeksha lmeval generator names: lm-eval-harness tasks whose documents become
    sessions (`dagperf.synthetic.lmeval`). `source` names the config in messages."""

    source: str
    tasks: tuple[str, ...]
    num_fewshot: int
    include_paths: tuple[Path, ...]  # task directories besides lm-eval's own (dagperf's field)
    max_sessions: int  # documents to take; -1: all of them
    seed: int
    cancel_session_on_failure: bool | None = None  # the config's traffic_scheduler says


class ConfigError(Exception):
    """A session config that cannot be used; the message is for the user, one problem a line."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {problem}" for problem in problems))
