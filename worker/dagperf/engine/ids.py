"""Random request and correlation ids: version 4 UUIDs in their usual text form.

Every request takes one, and every session another, in the scheduler's hot path: `uuid.uuid4()`
costs a `getrandom` call and two conversions per id. Here the random bytes come from the same
source (`os.urandom`) 256 ids at a time, and each id is cut out of their hexadecimal text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

_BATCH = 256
# The variant's two high bits are 10: the first hex digit of the fourth group is 8, 9, a or b.
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def _ids() -> Iterator[str]:
    while True:
        block = os.urandom(16 * _BATCH).hex()
        for at in range(0, 32 * _BATCH, 32):
            h = block[at : at + 32]
            yield f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


_stream = _ids()


def _fresh_stream() -> None:
    """A forked child must not hand out the ids left in its parent's block."""
    global _stream
    _stream = _ids()


os.register_at_fork(after_in_child=_fresh_stream)


def new_uuid4() -> str:
    """A new random (version 4) UUID, as `str(uuid.uuid4())` writes it."""
    return next(_stream)
