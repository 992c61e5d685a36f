"""How `dagperf scheduler` waits for the worker processes that join it: the one role whose
options only a cluster run has. Its pod's operator sets each of them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from dagperf.vocabulary.config import MAX_SECONDS
from dagperf.vocabulary.options import Option


class SchedulerRoleOptions(BaseModel):
    """The scheduler's ZeroMQ address, and the workers it waits for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bind: Annotated[str, Option(metavar="ADDRESS", local="the operator's ZeroMQ port setting")] = (
        Field(default="tcp://0.0.0.0:5555", description="The ZeroMQ address workers connect to.")
    )
    workers_expected: Annotated[
        int, Option(metavar="N", local="spec.workers: replicas times processesPerPod")
    ] = Field(default=1, ge=1, description="Workers to wait for before starting.")
    registration_timeout: Annotated[
        float, Option(metavar="S", local="the operator waits 600 s, for pods pulling an image")
    ] = Field(
        default=300.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Seconds to wait for them.",
    )
    worker_timeout: Annotated[
        float, Option(metavar="S", local="the kubelet restarts a worker pod that dies")
    ] = Field(
        default=10.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="A worker silent this long is lost.",
    )
