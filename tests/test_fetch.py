"""Datasets by URL: fetched from a real HTTP server on loopback, run only with the digest they
must have; every way it can go wrong named, nothing sent, the URL's query never recorded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs import file_server, free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "dag_jsonl" / "example.dag.jsonl"
DIGEST = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()


def dagperf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dagperf", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example and a broken file, served on loopback."""
    directory = tmp_path_factory.mktemp("served")
    (directory / "example.dag.jsonl").write_bytes(EXAMPLE.read_bytes())
    (directory / "broken.dag.jsonl").write_text('{"session_id": "a"}\n')
    with file_server(directory) as url:
        yield url


def test_a_run_from_a_url_records_it_without_its_query(served, tmp_path):
    url = f"{served}/example.dag.jsonl?signature=s3cr3t"
    done = dagperf("profile", "--input-file", url, "--input-sha256", DIGEST.upper(),
                   "--artifact-dir", str(tmp_path), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "profile_export_aiperf.json").read_text())
    assert summary["dagperf_config"]["dataset"]["path"] == f"{served}/example.dag.jsonl"
    assert summary["request_count"]["avg"] > 0
    for written in (*tmp_path.iterdir(),):
        assert "s3cr3t" not in written.read_text(), written.name
    assert "s3cr3t" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "digest", "said"),
    [
        ("example.dag.jsonl", "0" * 64, f"sha256 is {DIGEST}, expected {'0' * 64}"),
        ("example.dag.jsonl", None, "a dataset URL needs the sha256 its file must have"),
        ("example.dag.jsonl", "abc", "sha256: expected 64 hexadecimal digits, got 'abc'"),
        ("missing.dag.jsonl", "0" * 64, "the server answered HTTP 404 File not found"),
    ],
)
def test_a_url_that_cannot_be_run_is_refused_before_anything_is_sent(
    served, tmp_path, name, digest, said
):
    flags = [] if digest is None else ["--input-sha256", digest]
    done = dagperf("profile", "--input-file", f"{served}/{name}", *flags,
                   "--artifact-dir", str(tmp_path), "--quiet")  # fmt: skip
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "profile_export.jsonl").exists()


def test_unreachable_urls_and_broken_files_are_named(served, tmp_path):
    closed = f"http://127.0.0.1:{free_port()}/example.dag.jsonl"
    done = dagperf("validate", closed, "--sha256", DIGEST)
    assert done.returncode == 1
    assert f"dagperf: {closed}: cannot fetch: [Errno 111] Connection refused" in done.stdout
    broken = f"{served}/broken.dag.jsonl"
    digest = hashlib.sha256(b'{"session_id": "a"}\n').hexdigest()
    done = dagperf("validate", broken, "--sha256", digest)
    assert done.returncode == 1
    assert done.stdout.startswith(f"{broken}:1: ")  # the problems name the URL, not a copy
    fine = dagperf("validate", f"{served}/example.dag.jsonl", "--sha256", DIGEST)
    assert fine.returncode == 0 and fine.stdout.startswith(f"{served}/example.dag.jsonl: valid")


def test_a_local_file_can_be_pinned_too(tmp_path):
    assert dagperf("validate", str(EXAMPLE), "--sha256", DIGEST).returncode == 0
    done = dagperf("validate", str(EXAMPLE), "--sha256", "1" * 64)
    assert done.returncode == 1
    assert f"{EXAMPLE}: sha256 is {DIGEST}, expected {'1' * 64}" in done.stdout


# --- `dagperf fetch`: what a Benchmark pod's init container runs ------------------------------


def fetch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dagperf", "fetch", *args],
        capture_output=True, text=True, timeout=120, env=None if env is None else os.environ | env,
    )  # fmt: skip


def test_fetch_writes_the_file_once_its_digest_is_right(served, tmp_path):
    output = tmp_path / "d.jsonl"
    url = f"{served}/example.dag.jsonl?X-Amz-Signature=s3cr3t"
    done = fetch("--url-env", "DATASET_URL", "--sha256", DIGEST.upper(), "--output", str(output),
                 env={"DATASET_URL": url})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert output.read_bytes() == EXAMPLE.read_bytes()
    assert list(tmp_path.iterdir()) == [output]  # no temporary left beside it
    size = EXAMPLE.stat().st_size
    said = f"fetched {served}/example.dag.jsonl to {output} ({size:,} bytes, sha256 checked)\n"
    assert (done.stdout, done.stderr) == (said, "")
    again = fetch(url, "--sha256", DIGEST, "-o", str(output))  # the URL as an argument too
    assert again.returncode == 0 and output.read_bytes() == EXAMPLE.read_bytes()


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("example.dag.jsonl", "{served}/example.dag.jsonl: sha256 is {got}, expected {wrong}"),
        ("missing.dag.jsonl", "{served}/missing.dag.jsonl: the server answered HTTP 404 File "
                              "not found"),
        (None, "{closed}: cannot fetch: [Errno 111] Connection refused"),
    ],
)  # fmt: skip
def test_fetch_that_fails_says_why_in_one_line_and_leaves_no_file(served, tmp_path, name, said):
    output = tmp_path / "d.jsonl"
    closed = f"http://127.0.0.1:{free_port()}/example.dag.jsonl"
    url = closed if name is None else f"{served}/{name}"
    wrong = "0" * 64
    done = fetch("--url-env", "U", "--sha256", wrong, "--output", str(output),
                 env={"U": f"{url}?sig=s3cr3t"})  # fmt: skip
    assert done.returncode == 1
    expected = said.format(served=served, closed=closed, got=DIGEST, wrong=wrong)
    assert (done.stdout, done.stderr) == ("", f"dagperf fetch: {expected}\n")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--url-env", "UNSET_URL", "--sha256", DIGEST], {}, "$UNSET_URL is not set"),
        (["{served}/example.dag.jsonl", "--sha256", "xyz"], {},
         "sha256: expected 64 hexadecimal digits, got 'xyz'"),
        (["ftp://127.0.0.1/d.jsonl", "--sha256", DIGEST], {}, "ftp://127.0.0.1/d.jsonl: not an "
         "http(s) URL"),
        (["{served}/example.dag.jsonl", "--sha256", DIGEST, "-o", "{tmp}/no/such/dir/d"], {},
         "{tmp}/no/such/dir/d: cannot write there: No such file or directory"),
    ],
)  # fmt: skip
def test_fetch_refuses_what_it_cannot_do(served, tmp_path, args, env, said):
    args = [a.format(served=served, tmp=tmp_path) for a in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "d")]
    done = fetch(*args, env={"UNSET_URL": ""} | env)
    assert done.returncode == 1
    assert done.stderr == f"dagperf fetch: {said.format(tmp=tmp_path)}\n"
    assert not (tmp_path / "d").exists()
