"""Datasets named by an HTTP(S) URL: fetched to a temporary file whose SHA-256 must be the one
given before a byte of it is parsed, so a changed or truncated file is refused rather than run.

A local file may be pinned the same way. What is recorded of a URL (exports, logs) leaves out
its query and credentials: a presigned URL's signature is a secret.

`save` keeps the checked file instead (`dagperf fetch`, a Benchmark pod's init container): it is
written under a temporary name beside its destination and renamed only once its digest is
right, so the destination never holds a partial or wrong file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlsplit, urlunsplit

CHUNK = 1 << 20
TIMEOUT_S = 60.0
SHA256 = re.compile(r"[0-9a-f]{64}")
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class FetchError(Exception):
    """A dataset that could not be fetched or does not have its digest; says which and why."""


def is_url(name: str) -> bool:
    return name.startswith(("http://", "https://"))


def shown(name: str) -> str:
    """The URL without credentials, query or fragment; a path as it is."""
    if not is_url(name):
        return name
    parts = urlsplit(name)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def file_name(url: str) -> str:
    """The last segment of the URL's path, as a local file name: "dataset" when it is empty
    or holds anything but letters, digits, '.', '_' and '-' (no escapes, no dot files)."""
    name = urlsplit(url).path.rsplit("/", 1)[-1]
    return name if SAFE_NAME.fullmatch(name) else "dataset"


def check_digest(sha256: str) -> str:
    digest = sha256.strip().lower()
    if not SHA256.fullmatch(digest):
        raise FetchError(f"sha256: expected 64 hexadecimal digits, got {sha256!r}")
    return digest


@contextlib.contextmanager
def local_copy(name: str, sha256: str | None) -> Iterator[Path]:
    """A path to read the dataset `name` from, its digest checked when one is given (a URL
    must have one); a fetched copy is deleted when the block ends."""
    digest = None if sha256 is None else check_digest(sha256)
    if not is_url(name):
        if digest is not None:
            try:
                with open(name, "rb") as f:
                    _verify(name, _copy(f, None), digest)
            except OSError as e:
                raise FetchError(f"{name}: {e.strerror or e}") from None
        yield Path(name)
        return
    if digest is None:
        raise FetchError(f"{shown(name)}: a dataset URL needs the sha256 its file must have")
    fd, path = tempfile.mkstemp(prefix="dagperf-dataset-")
    try:
        with os.fdopen(fd, "wb") as out:
            _verify(name, _download(name, out), digest)
        yield Path(path)
    finally:
        os.unlink(path)


def save(url: str, sha256: str, output: Path) -> int:
    """Fetch `url` to `output` once its digest is `sha256`; its size in bytes."""
    digest = check_digest(sha256)
    if not is_url(url):
        raise FetchError(f"{shown(url)}: not an http(s) URL")
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    except OSError as e:
        raise FetchError(f"{output}: cannot write there: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            _verify(url, _download(url, out), digest)
        os.replace(temporary, output)
    except OSError as e:  # writing or renaming the copy: the fetch's own errors are FetchErrors
        os.unlink(temporary)
        raise FetchError(f"{output}: cannot write there: {e.strerror or e}") from None
    except BaseException:
        os.unlink(temporary)
        raise
    return output.stat().st_size


def _download(url: str, out: BinaryIO) -> str:
    request = urllib.request.Request(url, headers={"User-Agent": "dagperf"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return _copy(response, out)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{shown(url)}: the server answered HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise FetchError(f"{shown(url)}: cannot fetch: {reason}") from None


def _copy(source: Readable, out: BinaryIO | None) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest()


def _verify(name: str, got: str, expected: str) -> None:
    if got != expected:
        raise FetchError(f"{shown(name)}: sha256 is {got}, expected {expected}")
