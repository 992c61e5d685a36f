"""Request and correlation ids: random version 4 UUIDs, none repeated, none shared with a fork."""

from __future__ import annotations

import os
import uuid

from dagperf.engine.ids import new_uuid4


def test_ids_are_version_4_uuids_in_their_usual_text() -> None:
    ids = [new_uuid4() for _ in range(5000)]  # past one block of random bytes
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text


def test_a_forked_child_does_not_repeat_its_parents_next_ids() -> None:
    new_uuid4()  # the parent holds a block with ids still to come
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, "\n".join(new_uuid4() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split("\n"))
    os.waitpid(pid, 0)
    parent = {new_uuid4() for _ in range(10)}
    assert len(child) == 10 and not child & parent
