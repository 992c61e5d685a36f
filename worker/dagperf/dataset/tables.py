"""Trace rows from JSON lines or CSV, as Veeksha reads a trace flavour's file either way.

Veeksha loads a trace with pandas, as CSV or as JSON lines; a CSV header may say
`num_prefill_tokens` and `num_decode_tokens` for `input_length` and `output_length`. Here the
first non-blank line tells the two apart (a JSON object starts with `{`; a ConfigMap's file has
no extension to go by). CSV is parsed as a whole stream, so a quoted prompt may span lines, and
each row is numbered by the line it starts on. A cell is read as pandas reads a column of such
cells: a whole number as an int, another number as a float, an empty cell as absent, the rest
as text.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections.abc import Iterable, Iterator
from typing import Any

from dagperf.dataset.loader import Problems, jsonl_lines, object_lines

RENAMED = {"num_prefill_tokens": "input_length", "num_decode_tokens": "output_length"}
_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def table_rows(
    lines: Iterable[bytes], problems: Problems, unit: str, required: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Numbered rows as dicts; a line or row that is not one has its problem added, and so has
    a CSV header without the `required` columns (a JSON row's caller checks its own)."""
    lines = iter(lines)
    head: list[bytes] = []  # the blank lines before the first that says which format it is
    for first in lines:
        if first.strip():
            break
        head.append(first)
    else:
        return
    stream = itertools.chain(head, [first], lines)
    if first.lstrip(b"\xef\xbb\xbf \t").startswith(b"{"):
        yield from object_lines(jsonl_lines(stream), problems, unit)
    else:
        yield from _csv_rows(stream, problems, required)


def _csv_rows(
    lines: Iterable[bytes], problems: Problems, required: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, Any]]]:
    data = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    reader = csv.reader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", newline=""))
    try:
        names = next((row for row in reader if any(cell.strip() for cell in row)), [])
        header = [RENAMED.get(name.strip(), name.strip()) for name in names]
        if missing := [c for c in required if c not in header]:
            problems.add(reader.line_num, f"the CSV header needs {' and '.join(missing)}")
            return
        start = reader.line_num + 1
        for cells in reader:
            if any(cell.strip() for cell in cells):
                if len(cells) > len(header):
                    problems.add(start, f"{len(cells)} cells under a header of {len(header)}")
                else:
                    yield start, {k: _cell(v) for k, v in zip(header, cells, strict=False) if v}
            start = reader.line_num + 1
    except (csv.Error, UnicodeDecodeError) as e:
        problems.add(reader.line_num or None, f"not CSV text: {e}")


def _cell(value: str) -> Any:
    text = value.strip()
    if _INTEGER.fullmatch(text):
        return int(text)
    if _NUMBER.fullmatch(text):
        return float(text)
    return value
