"""A loaded dag_jsonl dataset keeps where each line lies, not its prompts, and reads a
conversation back when a tree that holds it is built: these tests hold that reading to the
file as loaded (a changed file is an error, never a wrong request) and a large file read in
two processes to the same dataset and the same problems as one read in one."""

from __future__ import annotations

import dataclasses
import gzip
import multiprocessing
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp import web

from dagperf.dataset import DatasetError
from dagperf.dataset.formats.dag_jsonl import file_pass, line_store, load_dag_jsonl
from dagperf.dataset.formats.dag_jsonl import halves as dag_halves
from dagperf.dataset.formats.dag_jsonl.line_store import FileChanged
from dagperf.dataset.formats.dag_jsonl.lines import Interned
from dagperf.graph import compile_dag_jsonl

from dagfile import conv, encode, line_numbers, turn, user
from runs import finish, serving, start_profile


def write(path: Path, *lines) -> Path:
    path.write_bytes(b"".join(encode(*lines)))
    return path


def sent(dataset, sid: str) -> list:
    return [p.messages for p in dataset.lines.conversation(sid, Interned()).payloads]


def test_a_line_naming_its_context_mode_as_null_is_read_back_among_plain_ones(tmp_path):
    """A null conversation field is still a field the plain records do not have: the file is
    read back whole (before, its line was taken for a changed file when the run reached it)."""
    lines = [conv(f"s{i}", turn()) for i in range(50)]
    lines[7] = conv("s7", turn(), context_mode=None)
    graph = compile_dag_jsonl(load_dag_jsonl(write(tmp_path / "d.jsonl", *lines)))
    assert sum(len(tree.nodes) for tree in graph.trees) == 50


def test_a_conversation_is_read_back_from_the_file_as_it_was_loaded(tmp_path):
    path = write(tmp_path / "d.jsonl", conv("a", turn(forks=["b"])), conv("b", turn(), turn()))
    dataset = load_dag_jsonl(path)
    assert dataset.lines.store.fd is not None  # read back by offset, not held
    assert sent(dataset, "b") == [[user()], [user()]]
    packed = tmp_path / "d.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    held = load_dag_jsonl(packed)
    assert held.lines.store.fd is None  # a compressed file's offsets are not the file's
    assert sent(held, "b") == sent(dataset, "b")


def test_a_file_changed_after_loading_is_an_error_not_a_wrong_request(tmp_path):
    path = write(tmp_path / "d.jsonl", conv("a"), conv("b"))
    dataset = load_dag_jsonl(path)
    stat = path.stat()
    # The same size and modification time, another session on line 2: the line says so.
    path.write_bytes(path.read_bytes().replace(b'"b"', b'"c"'))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(FileChanged) as caught:
        dataset.lines.conversation("b", Interned())
    assert str(caught.value) == (
        f"{path}:2: the file changed after it was loaded (line 2 no longer holds session 'b'); "
        "a dataset must stay as it is while a run reads it"
    )
    with path.open("ab") as f:  # grown: caught before any line is read
        f.write(b"\n")
    with pytest.raises(FileChanged, match="its size or modification time differs"):
        dataset.lines.conversation("a", Interned())


def test_a_file_replaced_after_loading_is_still_read_as_loaded(tmp_path):
    path = write(tmp_path / "d.jsonl", conv("a"))
    dataset = load_dag_jsonl(path)
    write(tmp_path / "new.jsonl", conv("z", turn(messages=[user("other")])))
    (tmp_path / "new.jsonl").replace(path)  # the loader's descriptor still reads the old file
    assert sent(dataset, "a") == [[user()]]


def listed(graph) -> list:
    return [(sid, [p.messages for p in payloads]) for sid, payloads in graph.conversations()]


@pytest.mark.parametrize("gzipped", [False, True])
def test_every_conversation_is_listed_once_in_file_order_as_the_trees_send_it(
    tmp_path, monkeypatch, gzipped
):
    """inputs.json's pass: the file read in order, a few lines per read, is what walking
    every tree gives (a conversation two parents spawn, once), in the file's order."""
    monkeypatch.setattr(line_store, "READ_BYTES", 64)  # many reads, and lines longer than one
    lines = [conv("c", turn(messages=[user("c" * 100)])), conv("r", turn(spawns=["c", "s"]))]
    lines += [conv("s", turn(), turn()), conv("t", turn(spawns=["c"]))]
    path = write(tmp_path / "d.jsonl", *lines)
    if gzipped:
        path.with_suffix(".gz").write_bytes(gzip.compress(path.read_bytes()))
        path = path.with_suffix(".gz")
    graph = compile_dag_jsonl(load_dag_jsonl(path))
    walked = listed(dataclasses.replace(graph, listed=None))
    assert [sid for sid, _ in walked] == ["r", "c", "s", "t"]  # the trees' order
    assert listed(graph) == sorted(walked, key=lambda entry: "crst".index(entry[0]))


def test_a_file_changed_before_the_listing_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(line_store, "READ_BYTES", 64)
    path = write(tmp_path / "d.jsonl", *[conv(f"s{i}") for i in range(6)])
    graph = compile_dag_jsonl(load_dag_jsonl(path))
    stat = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"s4"', b'"x4"'))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    listing = graph.conversations()
    assert [next(listing).conversation_id for _ in range(4)] == ["s0", "s1", "s2", "s3"]
    with pytest.raises(FileChanged, match="line 5 no longer holds session 's4'"):
        next(listing)


def lines_in_both_halves(good: bool) -> list:
    """Forks and spawns that cross the file's middle both ways; when not `good`, problems in
    both halves and across them."""
    background = {"child": "x", "background": True}
    first = [conv("r", turn(forks=[background]), turn(spawns=["y"])), conv("p", turn(forks=["q"]))]
    first += [conv(f"f{i}", turn(messages=[user("f" * 200)])) for i in range(40)]
    second = [conv("q"), conv("x"), conv("y", turn(forks=["z"])), conv("z")]
    second += [conv(f"s{i}", turn(messages=[user("s" * 200)])) for i in range(40)]
    if not good:  # a half numbers its own edges: 'dup' in both must still be the first one
        first += [conv("dup"), conv("o", turn(forks=["dup"]))]
        second += [conv("dup"), conv("bad", turn(max_tokens=0)), conv("w", turn(forks=["q"]))]
        second.append(conv("v", turn(forks=["dup"])))
        second.append(conv("u", turn(spawns=["nowhere"])))
    return first + second


def read(path: Path, split: int, monkeypatch) -> object:
    """The dataset or its problems, read in two processes when `split` is below its size (and
    checked to be)."""
    monkeypatch.setattr(dag_halves, "SPLIT_BYTES", split)
    middles: list[int | None] = []
    find = dag_halves._middle
    monkeypatch.setattr(
        dag_halves, "_middle", lambda store: middles.append(find(store)) or middles[-1]
    )
    try:
        return load_dag_jsonl(path)
    except DatasetError as e:
        return [str(p) for p in e.problems]
    finally:
        assert (middles[0] is not None) == (split < path.stat().st_size), middles


@pytest.mark.parametrize("good", [True, False])
def test_two_processes_read_a_file_as_one_does(tmp_path, monkeypatch, good):
    path = write(tmp_path / "d.jsonl", *lines_in_both_halves(good))
    whole, halves = read(path, 1 << 40, monkeypatch), read(path, 1, monkeypatch)
    if not good:
        assert any("duplicate session_id 'dup'" in p for p in halves)
        assert any("forked by both 'p' turn 0 and 'w' turn 0" in p for p in halves)
        assert any("'dup' forked by both 'o' turn 0 and 'v' turn 0" in p for p in halves)
        assert halves == whole
        return
    assert line_numbers(halves) == line_numbers(whole)
    assert (halves.roots, halves.turns) == (whole.roots, whole.turns)
    graph, once = compile_dag_jsonl(halves), compile_dag_jsonl(whole)
    assert graph.shape == once.shape
    assert list(graph.trees) == list(once.trees)


def test_a_child_that_dies_costs_only_time(tmp_path, monkeypatch):
    path = write(tmp_path / "d.jsonl", *lines_in_both_halves(good=True))
    whole = read(path, 1 << 40, monkeypatch)
    monkeypatch.setattr(dag_halves, "_second_half", lambda *args: os._exit(1))
    assert line_numbers(read(path, 1, monkeypatch)) == line_numbers(whole)


@pytest.mark.parametrize("good", [True, False])
def test_a_child_that_dies_after_sending_its_ids_costs_only_time(tmp_path, monkeypatch, good):
    """The ids it sent ahead were filed (or, in both halves, not): they are taken back and
    its half read again, with the same dataset or the same problems as one pass."""
    path = write(tmp_path / "d.jsonl", *lines_in_both_halves(good))
    whole = read(path, 1 << 40, monkeypatch)
    real = file_pass.FilePass.part

    def dies_after_the_ids(self, with_sids=True):
        if not with_sids:  # in the child, its ids sent
            os._exit(1)
        return real(self, with_sids)

    monkeypatch.setattr(file_pass.FilePass, "part", dies_after_the_ids)
    halves = read(path, 1, monkeypatch)
    if good:
        assert line_numbers(halves) == line_numbers(whole)
        assert halves.ids == whole.ids
    else:
        assert halves == whole


def test_a_first_half_past_the_problem_cap_stops_the_second(tmp_path, monkeypatch):
    bad = [conv(f"b{i}", turn(max_tokens=0)) for i in range(150)]
    path = write(tmp_path / "d.jsonl", *bad, *lines_in_both_halves(good=True))
    problems = read(path, 1, monkeypatch)
    assert len(problems) == 101 and "stopped reading here" in problems[-1]
    assert multiprocessing.active_children() == []  # the second half's reader was stopped


def test_a_read_from_another_thread_stays_in_one_process(tmp_path, monkeypatch):
    """A fork copies only the calling thread: a process reading from a worker thread (the
    operator) never forks a reader."""
    path = write(tmp_path / "d.jsonl", *lines_in_both_halves(good=True))
    monkeypatch.setattr(dag_halves, "SPLIT_BYTES", 1)
    forked = []
    monkeypatch.setattr(dag_halves, "_middle", lambda store: forked.append(store))
    with ThreadPoolExecutor(1) as pool:
        dataset = pool.submit(load_dag_jsonl, path).result()
    assert forked == [] and len(dataset.ids) == 86
    load_dag_jsonl(path)  # from the main thread, it would
    assert len(forked) == 1


COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}  # fmt: skip


async def test_a_run_whose_file_changes_stops_with_the_reason(tmp_path):
    """The first request rewrites the dataset; the next tree the run builds is read from the
    changed file, so the run ends, failed, saying why, and sends nothing it would misread."""
    dataset = tmp_path / "data.dag.jsonl"
    bodies = []

    async def reply(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        dataset.write_bytes(dataset.read_bytes().replace(b'"b"', b'"B"'))
        return web.json_response(COMPLETION)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reply)
    lines = [conv(name, turn(messages=[user(name)])) for name in "ab"]
    async with serving(app) as url:
        flags = ("--model", "m", "--concurrency", "1", "--request-count", "2")
        process, directory = await start_profile(url, tmp_path, lines, *flags)
        run = await finish(process, directory, None)
    assert [b["messages"] for b in bodies] == [[user("a")]]
    assert run.returncode != 0, run.stderr
    assert f"the run failed: {dataset}: the file changed after it was loaded" in run.stderr
    assert "Traceback" not in run.stderr
