"""The keys that make the wire between scheduler and workers private and authenticated.

ZeroMQ's CURVE handshake does both: a worker must know the scheduler's public key to connect
(so it cannot be fooled into serving another scheduler), and the scheduler admits only clients
that prove they hold the workers' secret key (checked by a ZAP handler, `Gate`). Every frame
after the handshake is encrypted. One worker key pair is shared by all workers of a benchmark:
they are one principal, and a per-pod key would have to reach the scheduler before the run.

A key set is a directory of small files, one value each, the same names as the keys of the
Secret the operator creates per Benchmark (so a Secret volume *is* a key directory):

    scheduler.public  scheduler.secret  worker.public  worker.secret  control.token

Each role reads only what it needs: the scheduler its own pair, the workers' public key and the
control token (which POST /stop must present); a worker its own pair and the scheduler's public
key. `dagperf keys DIR` writes a set for roles started by hand; `dagperf profile` makes one in
memory for every run. Keys never travel on a command line or in a log.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

KEYS_ENV = "DAGPERF_KEYS"  # the default key directory of the scheduler and worker roles
FILES = ("scheduler.public", "scheduler.secret", "worker.public", "worker.secret", "control.token")
SCHEDULER_FILES = ("scheduler.public", "scheduler.secret", "worker.public", "control.token")
WORKER_FILES = ("scheduler.public", "worker.public", "worker.secret")
_Z85_KEY_LENGTH = 40


class KeysError(Exception):
    """A key set cannot be made or read; the message names the file and the problem."""


@dataclass(frozen=True, repr=False)  # no repr: a secret must not reach a log by accident
class SchedulerKeys:
    public: bytes
    secret: bytes
    worker_public: bytes
    control_token: str

    def token_matches(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode(), self.control_token.encode())


@dataclass(frozen=True, repr=False)
class WorkerKeys:
    public: bytes
    secret: bytes
    scheduler_public: bytes


@dataclass(frozen=True, repr=False)
class KeySet:
    scheduler: SchedulerKeys
    worker: WorkerKeys

    @classmethod
    def generate(cls, control_token: str | None = None) -> KeySet:
        scheduler_public, scheduler_secret = zmq.curve_keypair()
        worker_public, worker_secret = zmq.curve_keypair()
        token = control_token or secrets.token_urlsafe(32)
        return cls(
            SchedulerKeys(scheduler_public, scheduler_secret, worker_public, token),
            WorkerKeys(worker_public, worker_secret, scheduler_public),
        )

    def files(self) -> dict[str, str]:
        """File name -> content: what `write` puts in a directory and a Secret holds."""
        scheduler, worker = self.scheduler, self.worker
        return {
            "scheduler.public": scheduler.public.decode(),
            "scheduler.secret": scheduler.secret.decode(),
            "worker.public": worker.public.decode(),
            "worker.secret": worker.secret.decode(),
            "control.token": scheduler.control_token,
        }

    def write(self, directory: Path, only: tuple[str, ...] = FILES) -> None:
        """Write the named files (owner-only) into `directory` (created 0700 if missing)."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        content = self.files()
        for name in only:
            path = directory / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(content[name] + "\n")


def load_scheduler_keys(directory: Path) -> SchedulerKeys:
    return SchedulerKeys(
        _key(directory, "scheduler.public"),
        _key(directory, "scheduler.secret"),
        _key(directory, "worker.public"),
        _read(directory, "control.token"),
    )


def load_worker_keys(directory: Path) -> WorkerKeys:
    return WorkerKeys(
        _key(directory, "worker.public"),
        _key(directory, "worker.secret"),
        _key(directory, "scheduler.public"),
    )


def _read(directory: Path, name: str) -> str:
    path = directory / name
    try:
        value = path.read_text().strip()
    except OSError as e:
        raise KeysError(f"cannot read key file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise KeysError(f"key file {path} is not text") from None
    if not value:
        raise KeysError(f"key file {path} is empty")
    return value


def _key(directory: Path, name: str) -> bytes:
    value = _read(directory, name)
    try:
        valid = len(value) == _Z85_KEY_LENGTH and len(zmq.utils.z85.decode(value)) == 32
    except (ValueError, KeyError, UnicodeEncodeError):
        valid = False
    if not valid:
        raise KeysError(f"key file {directory / name} does not hold a Z85 CURVE key (40 chars)")
    return value.encode()


def secure_server(socket: zmq.Socket[bytes], keys: SchedulerKeys) -> None:
    """Make `socket` a CURVE server: clients must pass the `Gate` of its context."""
    socket.curve_server = True
    socket.curve_publickey = keys.public
    socket.curve_secretkey = keys.secret
    socket.zap_domain = b"dagperf"


def secure_client(socket: zmq.Socket[bytes], keys: WorkerKeys) -> None:
    """Make `socket` a CURVE client of the scheduler whose public key `keys` names."""
    socket.curve_serverkey = keys.scheduler_public
    socket.curve_publickey = keys.public
    socket.curve_secretkey = keys.secret


class _Allowed:
    """pyzmq's credentials provider: admit exactly one client public key."""

    def __init__(self, public: bytes) -> None:
        self._public = public

    def callback(self, domain: str, key: bytes) -> bool:
        return hmac.compare_digest(key, self._public)


class Gate:
    """The ZAP handler of a context: admits only CURVE clients holding the workers' key.

    A context with a ZAP handler refuses a CURVE client the handler does not admit; without
    one, libzmq would admit anyone who knows the (public) server key.
    """

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], keys: SchedulerKeys) -> None:
        self._auth = ThreadAuthenticator(
            context, log=logging.getLogger("dagperf.vocabulary.keys.zap")
        )
        self._auth.start()
        self._auth.configure_curve_callback("dagperf", _Allowed(keys.worker_public))

    def close(self) -> None:
        self._auth.stop()
