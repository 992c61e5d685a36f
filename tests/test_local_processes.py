"""A local run's simulator and workers start while its dataset is read, wait for the word to
connect, and none of them (nor the run's keys) outlives a run that never began: the real
`dagperf profile` runs in this process (or a child, where it is sent a signal), and its
simulator and workers are real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dagperf.cli import main, plan
from dagperf.local_processes import LocalProcesses

from dagfile import conv, encode, turn
from runs import children, dagperf_processes, free_port


def dataset(tmp_path: Path, *lines: dict) -> str:
    path = tmp_path / "data.dag.jsonl"
    path.write_bytes(b"".join(encode(*lines)))
    return str(path)


def roles_running() -> list[str]:
    """The dagperf commands this process's children run (`simulate`, `worker`)."""
    found = []
    for pid in children(os.getpid()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"dagperf"]:
            found.append(argv[3].decode())
    return sorted(found)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """The temporary directory the run's socket and keys go to, empty."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def test_the_simulator_and_workers_start_while_the_dataset_is_read(
    tmp_path, monkeypatch, private_tmp
):
    seen: list[list[str]] = []
    read = plan.graph_and_load

    def reading(*args, **kwargs):
        seen.append(roles_running())
        return read(*args, **kwargs)

    monkeypatch.setattr(plan, "graph_and_load", reading)
    out = tmp_path / "out"
    data = dataset(tmp_path, conv("p", turn(forks=["c"])), conv("c"))
    code = main(["profile", "--input-file", data, "--artifact-dir", str(out), "--quiet",
                 "--workers", "2"])  # fmt: skip
    assert code == 0
    assert seen == [["simulate", "worker", "worker"]]
    records = [json.loads(line) for line in (out / "profile_export.jsonl").open()]
    assert sorted(r["metadata"]["conversation_id"] for r in records) == ["c", "p"]
    assert not any(r["error"] for r in records)
    assert roles_running() == [] and list(private_tmp.iterdir()) == []


def test_a_refused_dataset_leaves_no_process_and_no_keys(tmp_path, private_tmp):
    data = dataset(tmp_path, conv("p", turn(forks=["ghost"])))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "dagperf", "profile", "--input-file", data,
         "--artifact-dir", str(out), "--quiet"],
        capture_output=True, text=True, timeout=60, env=os.environ | {"TMPDIR": str(private_tmp)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "branch target 'ghost' not declared" in done.stderr
    assert dagperf_processes() == set()  # its children were this session's to inherit
    assert list(private_tmp.iterdir()) == [] and not out.exists()


def test_workers_of_a_run_that_fails_before_it_starts_exit_on_their_own(
    tmp_path, monkeypatch, private_tmp, capfd
):
    """No model name can be read from a server that is not there: the run fails before its
    workers were told to connect, and they end at the end of their input, not by a signal."""
    signalled: list[int] = []
    for name in ("terminate", "kill", "send_signal"):
        real = getattr(subprocess.Popen, name)

        def record(process, *args, real=real):
            signalled.append(process.pid)
            return real(process, *args)

        monkeypatch.setattr(subprocess.Popen, name, record)
    ended: list[int | None] = []
    stop = LocalProcesses.stop

    async def stopping(self: LocalProcesses) -> None:
        await stop(self)
        ended.extend(process.returncode for _, process in self.workers)
        signalled[:] = [pid for pid in signalled if pid in {p.pid for _, p in self.workers}]

    monkeypatch.setattr(LocalProcesses, "stop", stopping)
    data = dataset(tmp_path, conv("p"))
    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    code = main(["profile", "--input-file", data, "--url", url, "--workers", "2",
                 "--artifact-dir", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    assert code == 1
    assert "could not read a model name" in capfd.readouterr().err
    assert ended == [0, 0] and signalled == []
    assert roles_running() == [] and list(private_tmp.iterdir()) == []


SIGNALLED_WHILE_READING = """
import os, signal, sys
from dagperf.cli import main, plan
read = plan.graph_and_load
def reading(*args, **kwargs):
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return read(*args, **kwargs)
plan.graph_and_load = reading
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_dataset_is_read_stops_everything(tmp_path, private_tmp, sig):
    data = dataset(tmp_path, conv("p"))
    command = [sys.executable, "-c", SIGNALLED_WHILE_READING, sig, "profile"]
    command += ["--input-file", data, "--artifact-dir", str(tmp_path / "out"), "--quiet"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60,
        env=os.environ | {"TMPDIR": str(private_tmp)},
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert dagperf_processes() == set()  # its children were this session's to inherit
    assert list(private_tmp.iterdir()) == []


def test_a_dagperf_process_starts_no_blas_thread_to_spin():
    """numpy's OpenBLAS starts a thread per core, which spins after every vector operation it
    is handed: CPU a run would measure as its own (it was a quarter of the scheduler's per
    request). dagperf keeps BLAS to the thread that calls it."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = "import os, dagperf.metrics.summary; print(len(os.listdir('/proc/self/task')))"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1"]
