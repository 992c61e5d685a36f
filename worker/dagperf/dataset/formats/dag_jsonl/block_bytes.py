"""What a block of lines holds, read off its bytes by numpy before it is decoded.

The fast pass (`file_pass.FilePass.take_block`) hands a block to msgspec whole only when no
line in it needs a look of its own. These checks say so in a few vectorised passes over the
block's bytes; each is the byte-for-byte rule of its line-by-line twin in `dataset.limits`,
and conservative the same way (False is sure). A byte search per rule (`bytes.translate`,
`in`) walked a megabyte several times over, a third of the block's cost.
"""

from __future__ import annotations

import numpy as np

from dagperf.dataset.limits import MAX_DEPTH

_NEWLINE, _BACKSLASH, _PLUS, _OPEN_LIST, _OPEN_OBJECT = b"\n\\+[{"
_LOWER_E, _CASE = ord("e"), 0x20
_DIGIT_RUN = 19  # the digits of an integer that may not fit 64 bits (limits.suspect_digits)


class BlockBytes:
    """A block of whole lines as bytes, and where each line ends."""

    def __init__(self, data: bytes):
        self.octets = np.frombuffer(data, np.uint8)
        self.ends = np.flatnonzero(self.octets == _NEWLINE)  # of all lines but the last

    def escapes_unicode(self) -> bool:
        """Whether a `\\u` escape may hide a key or a session id from a byte search."""
        slashes = np.flatnonzero(self.octets[:-1] == _BACKSLASH)
        return bool((self.octets[slashes + 1] == ord("u")).any())

    def suspect_digits(self) -> bool:
        """`limits.suspect_digits` over the block: a run of 19 digits, or an exponent of three
        (e, E or + before three digits)."""
        octets = self.octets
        digit = (octets - ord("0")) < 10  # uint8 wraps: below "0" is large
        mark = ((octets | _CASE) == _LOWER_E) | (octets == _PLUS)
        if (mark[:-3] & digit[1:-2] & digit[2:-1] & digit[3:]).any():
            return True
        at = np.flatnonzero(digit)
        return bool((at[_DIGIT_RUN - 1 :] - at[: 1 - _DIGIT_RUN] == _DIGIT_RUN - 1).any())

    def nests_deep(self) -> bool:
        """Whether a line opens more than MAX_DEPTH lists and objects, so may nest that deep:
        the brackets before each line's end are found by a binary search per line, not counted
        byte by byte."""
        octets = self.octets
        brackets = np.flatnonzero((octets == _OPEN_LIST) | (octets == _OPEN_OBJECT))
        if len(brackets) <= MAX_DEPTH:
            return False
        before = np.searchsorted(brackets, self.ends)  # the brackets before each line's end
        return bool(np.diff(before, prepend=0, append=len(brackets)).max() > MAX_DEPTH)
