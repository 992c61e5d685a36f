"""Logging for people (text) or for machines (one JSON object per line, for CI and pods)."""

from __future__ import annotations

import json
import logging
import sys
import time
import typing

LOG_FORMATS = ("text", "json")


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to sys.stderr as it is when a line is logged, not as it was when logging was set
    up: a command run in-process (a test, a notebook) whose stderr is swapped for one later
    closed would otherwise leave every later log line failing with "I/O operation on closed
    file" (the logging module then prints its "--- Logging error ---" blocks)."""

    @property
    def stream(self) -> typing.TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: object) -> None:
        pass  # StreamHandler.__init__ and setStream set it; the current one is always used


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    handler = CurrentStderr()
    if fmt == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
