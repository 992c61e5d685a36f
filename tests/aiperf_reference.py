"""AIPerf itself as the reference: run it and dagperf on the same file against the same recording
simulator, and keep what each put on the wire and what each exported.

AIPerf 0.13.0 lives in its own virtual environment (`tests/aiperf_install.sh`, which
`tests/run.sh` runs; `DAGPERF_AIPERF_HOME`, default `~/.cache/dagperf-aiperf`), never in
dagperf's: it is a reference, not a dependency. It runs offline, as bench/tools.py runs it: a
small tokenizer trained here, proxies pointed at a dead loopback port.

An AIPerf run costs ten seconds and nine processes, so what it sent is kept in that directory,
keyed by everything that decides it (AIPerf's version, the input's bytes, the flags, the
simulator's settings, this harness's version): a warm suite replays the reference, a changed
input or flag runs AIPerf again, and a fresh machine runs every case for real. dagperf always
runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dagperf.simulator import SimConfig, running_simulator

from runs import read_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from aiperf_fixtures import LIVE_REPLY
from tools import _offline_tokenizer

VERSION = "0.13.0"
HARNESS = 2  # bump when what a recording holds changes
HOME = Path(os.environ.get("DAGPERF_AIPERF_HOME") or Path.home() / ".cache" / "dagperf-aiperf")
TOKENIZER = "local/tiny-bpe"
INSTALL = "bash tests/aiperf_install.sh (tests/run.sh runs it)"
SIMULATOR = SimConfig(model="m", ttft_ms=5, itl_ms=1, output_tokens=6, record_bodies=True)


def executable() -> Path:
    found = HOME / "venv" / "bin" / "aiperf"
    assert found.exists(), f"AIPerf {VERSION}, the tests' reference, is not installed: {INSTALL}"
    return found


def python() -> Path:
    """AIPerf's own interpreter, to call its functions where a run cannot show a value."""
    return executable().parent / "python"


@dataclass
class Sent:
    """One request as the simulator received it."""

    body: dict[str, Any]
    correlation: str | None
    request_id: str | None
    received_ns: int
    end_ns: int
    reply: str | None


@dataclass
class Recording:
    """What one tool sent for a file, in arrival order, and the records it exported."""

    tool: str
    sent: list[Sent]
    records: list[dict[str, Any]]  # each record's metadata
    returncode: int
    log: str

    def bodies(self) -> list[dict[str, Any]]:
        """The bodies with every live reply in a history marked (the simulator's replies are
        not the point, the structure around them is), and the reply's cap named `max_tokens`
        whichever of chat's two names it was sent as (AIPerf says `max_completion_tokens` by
        default, dagperf's dag_jsonl and synthetic traces `max_tokens`; servers take both)."""
        replies = {s.reply for s in self.sent if s.reply}
        out = []
        for s in self.sent:
            body = dict(s.body)
            if "max_completion_tokens" in body and "max_tokens" not in body:
                body["max_tokens"] = body.pop("max_completion_tokens")
            if isinstance(body.get("messages"), list):
                body["messages"] = [_marked(m, replies) for m in body["messages"]]
            out.append(body)
        return out

    def keyed(self) -> dict[str, Sent]:
        """Each request by its body and how many identical ones came before it (a spine's
        rounds send the same bodies again, one round after the other)."""
        seen: Counter[str] = Counter()
        out = {}
        for body, sent in zip(self.bodies(), self.sent, strict=True):
            text = canonical(body)
            out[f"{text}#{seen[text]}"] = sent
            seen[text] += 1
        return out


def _marked(message: Any, replies: set[str]) -> Any:
    assistant = isinstance(message, dict) and message.get("role") == "assistant"
    if assistant and message.get("content") in replies:
        return {**message, "content": LIVE_REPLY}
    return message


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def multiset(bodies: Iterable[dict[str, Any]]) -> list[str]:
    return sorted(canonical(b) for b in bodies)


async def aiperf(
    data: Path,
    kind: str,
    *flags: str,
    sim: SimConfig = SIMULATOR,
    cached: bool = True,
    endpoint: str = "chat",
) -> Recording:
    """AIPerf's run of a file, replayed from the cache when nothing that decides it changed
    (unless not `cached`: a timing measurement runs it afresh)."""
    data = data.resolve()
    key = _key(data, kind, (*flags, endpoint), sim)
    kept = HOME / "recordings" / f"{key}.json"
    if cached and kept.exists():
        return _load(json.loads(kept.read_text()))
    _offline_tokenizer(HOME / "hf")
    # Its ZeroMQ sockets are files under TMPDIR, whose paths must fit 107 bytes.
    with tempfile.TemporaryDirectory(prefix="aiperf-") as work:
        recording = await _aiperf_run(
            data, kind, (*flags, "--endpoint-type", endpoint), sim, Path(work)
        )
    # AIPerf exits 0 when it could not start: a reference that sent nothing is no reference.
    assert recording.returncode == 0 and recording.sent, (
        f"AIPerf failed on {data}:\n{recording.log[-3000:]}"
    )
    assert len(recording.records) == len(recording.sent), recording.log[-3000:]
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(asdict(recording)))
    return recording


async def aiperf_verdict(data: Path, kind: str, *flags: str) -> tuple[int, str]:
    """AIPerf's exit code and output on a file it may refuse (kept as a run is)."""
    data = data.resolve()
    kept = HOME / "recordings" / f"verdict-{_key(data, kind, flags, SIMULATOR)}.json"
    if kept.exists():
        returncode, log = json.loads(kept.read_text())
        return returncode, log
    _offline_tokenizer(HOME / "hf")
    with tempfile.TemporaryDirectory(prefix="aiperf-") as work:
        run = await _aiperf_run(
            data, kind, (*flags, "--endpoint-type", "chat"), SIMULATOR, Path(work)
        )
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps([run.returncode, run.log]))
    return run.returncode, run.log


def tokenizer() -> Path:
    """The tokenizer.json AIPerf counts with (a small one, trained here)."""
    _offline_tokenizer(HOME / "hf")
    return next((HOME / "hf" / "hub").glob("models--local--tiny-bpe/snapshots/*/tokenizer.json"))


async def _aiperf_run(
    data: Path, kind: str, flags: Iterable[str], sim: SimConfig, work: Path
) -> Recording:
    out = work / "artifacts"
    command = [
        str(executable()), "profile", "--input-file", str(data), "--custom-dataset-type", kind,
        "--model", "m", "--tokenizer", TOKENIZER, "--ui-type", "none",
        "--output-artifact-dir", str(out), *flags,
    ]  # fmt: skip
    dead = "http://127.0.0.1:9"
    env = os.environ | {
        "HF_HOME": str(HOME / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "NO_PROXY": "",
        "TMPDIR": str(work),
    }
    return await _run("aiperf", command, "--url", out, sim, env=env, cwd=work)


async def dagperf(
    data: Path, kind: str, out: Path, *flags: str, sim: SimConfig = SIMULATOR
) -> Recording:
    """dagperf's run of the same file."""
    command = [
        sys.executable, "-m", "dagperf", "profile", "--input-file", str(data),
        "--custom-dataset-type", kind, "--model", "m", "--quiet", "--artifact-dir", str(out),
        *flags,
    ]  # fmt: skip
    return await _run("dagperf", command, "--url", out, sim)


async def _run(
    tool: str,
    command: list[str],
    url_flag: str,
    out: Path,
    sim: SimConfig,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Recording:
    async with running_simulator(sim) as running:
        process = await asyncio.create_subprocess_exec(
            *command, url_flag, running.url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=env or os.environ | {"PYTHONUNBUFFERED": "1"}, cwd=cwd,
        )  # fmt: skip
        output, _ = await asyncio.wait_for(process.communicate(), 300)
        served = sorted(
            (r for r in running.simulator.records if r.body is not None),
            key=lambda r: r.received_ns,
        )
    sent = [
        Sent(
            r.body,
            (r.headers or {}).get("X-Correlation-ID"),
            r.request_id,
            r.received_ns,
            r.end_ns or r.received_ns,
            r.reply,
        )
        for r in served
    ]
    records_file = out / "profile_export.jsonl"
    records = [r["metadata"] for r in read_jsonl(records_file)] if records_file.exists() else []
    assert process.returncode is not None
    return Recording(tool, sent, records, process.returncode, output.decode(errors="replace"))


def _key(data: Path, kind: str, flags: Iterable[str], sim: SimConfig) -> str:
    digest = hashlib.sha256()
    files = sorted(data.rglob("*")) if data.is_dir() else [data]
    for path in files:
        if path.is_file():
            digest.update(path.relative_to(data.parent).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    settings = [VERSION, HARNESS, kind, list(flags), sim.model_dump(mode="json")]
    digest.update(canonical(settings).encode())
    return digest.hexdigest()[:32]


def _load(kept: dict[str, Any]) -> Recording:
    return Recording(
        kept["tool"],
        [Sent(**s) for s in kept["sent"]],
        kept["records"],
        kept["returncode"],
        kept["log"],
    )


def edges_held(dagperf_run: Recording, reference: Recording) -> list[str]:
    """dagperf's exported dependencies (`depends_on`) that the reference did not keep: each
    request it sent before one dagperf made it wait for had ended. Requests are matched by
    conversation, turn and how many runs of the turn came before (`by_turn`)."""
    ours = by_turn(dagperf_run)
    key_of = {s.request_id: key for key, s in ours.items()}
    theirs = by_turn(reference)
    broken = []
    for record in dagperf_run.records:
        after = key_of[record["x_request_id"]]
        for dependency in record["depends_on"]:
            before = key_of[dependency]
            if theirs[after].received_ns < theirs[before].end_ns:
                broken.append(f"{after} before {before} ended")
    return broken


def prompt_of(body: dict[str, Any]) -> str:
    """A request's own prompt: a completion's `prompt`, or chat's last user message."""
    if "prompt" in body:
        prompt = body["prompt"]
        return prompt if isinstance(prompt, str) else canonical(prompt)
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def shape(body: dict[str, Any]) -> dict[str, Any]:
    """A body with synthesised text taken out: what must match where the two tools write
    different words (the roles, which assistant messages are live replies, each user message's
    length in words, and every other field as sent)."""
    out = {key: value for key, value in body.items() if key not in ("messages", "prompt")}
    if "prompt" in body:
        out["prompt_words"] = len(prompt_of(body).split())
    if isinstance(body.get("messages"), list):
        out["roles"] = [m.get("role") for m in body["messages"]]
        out["user_words"] = [
            len(str(m.get("content", "")).split())
            for m in body["messages"]
            if m.get("role") == "user"
        ]
        out["live"] = [m.get("content") == LIVE_REPLY for m in body["messages"]]
    return out


def shared_blocks(run: Recording, block_words: int) -> dict[tuple[int, int], int]:
    """For each pair of requests (in arrival order) whose prompts share a prefix, how many
    whole blocks of `block_words` words they share."""
    words = [prompt_of(body).split() for body in run.bodies()]
    out = {}
    for i in range(len(words)):
        for j in range(i + 1, len(words)):
            a, b = words[i], words[j]
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            if n // block_words:
                out[(i, j)] = n // block_words
    return out


def by_turn(run: Recording) -> dict[tuple[str, int, int], Sent]:
    """Each request by its conversation, its turn, and how many runs of that turn came before
    it (both tools' records name the conversation and turn of each request they sent)."""
    named = {r["x_request_id"]: (r["conversation_id"], r["turn_index"]) for r in run.records}
    seen: Counter[tuple[str, int]] = Counter()
    out = {}
    for sent in run.sent:
        turn = named[sent.request_id]
        out[(*turn, seen[turn])] = sent
        seen[turn] += 1
    return out


class Counted:
    """A request's messages in a tokenizer's tokens: each message's role and length, and the
    prompt as one sequence (a marker per message, then its tokens), whose shared prefix with
    another request's says how much of a server's cache they share."""

    def __init__(self, tokenizer_json: Path):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(tokenizer_json))

    def messages(self, body: dict[str, Any]) -> list[tuple[str, int]]:
        return [(m["role"], len(self._ids(m))) for m in body["messages"]]

    def prompt(self, body: dict[str, Any]) -> list[object]:
        out: list[object] = []
        for message in body["messages"]:
            out.append(f"<{message['role']}>")
            out.extend(self._ids(message))
        return out

    def _ids(self, message: dict[str, Any]) -> list[int]:
        return self._tokenizer.encode(message["content"], add_special_tokens=False).ids


def shared_prefixes(
    requests: dict[tuple[str, int, int], Sent], counted: Counted
) -> dict[tuple[tuple[str, int, int], tuple[str, int, int]], int]:
    """For each pair of requests, the tokens of prompt they share from the start."""
    prompts = {key: counted.prompt(sent.body) for key, sent in requests.items()}
    keys = sorted(prompts)
    out = {}
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            x, y = prompts[a], prompts[b]
            n = 0
            while n < min(len(x), len(y)) and x[n] == y[n]:
                n += 1
            out[(a, b)] = n
    return out


COINCIDENCE = 3  # tokens two unrelated texts may share by chance at their start


def agent_wire_differences(ours: Recording, theirs: Recording, tokenizer_json: Path) -> list[str]:
    """Where an agent-trace replay's requests differ from AIPerf's: which turns were sent, each
    message's role and tokens, the body's other fields, the prefix every two requests share
    (to within the token or two that unrelated runs of text may happen to open with alike:
    each tool cuts its own corpus), and every dependency dagperf kept that AIPerf did not."""
    mine, reference_requests = by_turn(ours), by_turn(theirs)
    if sorted(mine) != sorted(reference_requests):
        return [f"turns: {sorted(mine)} against {sorted(reference_requests)}"]
    counted, out = Counted(tokenizer_json), []
    for key, sent in mine.items():
        other = reference_requests[key]
        if counted.messages(sent.body) != counted.messages(other.body):
            out.append(f"{key}: messages {counted.messages(sent.body)}")
        if _fields(sent.body) != _fields(other.body):
            out.append(f"{key}: fields {_fields(sent.body)} against {_fields(other.body)}")
    shared = shared_prefixes(mine, counted)
    expected = shared_prefixes(reference_requests, counted)
    out += [
        f"{pair}: {n} tokens shared against {expected[pair]}"
        for pair, n in shared.items()
        if abs(n - expected[pair]) > COINCIDENCE
    ]
    return out + edges_held(ours, theirs)


def _fields(body: dict[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in body.items() if key != "messages"}
    if "max_completion_tokens" in out:  # the same limit, as each API names it
        out["max_tokens"] = out.pop("max_completion_tokens")
    return out
