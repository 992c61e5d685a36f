"""docs/kubernetes.md's table of every run option: its flag, and its Benchmark field or why a
Benchmark has none. `python -m dagperf.options.table` prints it; a test keeps the page's copy
current."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic.alias_generators import to_camel

from dagperf.options import CONCERNS, LOCAL_FLAGS, SEARCH
from dagperf.vocabulary.options import default_of, flag_name, options

BEGIN = "<!-- options table: python -m dagperf.options.table -->"
END = "<!-- end of the options table -->"


def table() -> str:
    lines = [
        BEGIN,
        "| flag | Benchmark field | default |",
        "|---|---|---|",
        *_rows(),
        *(f"| `{_flag(name)}` | local-only: {why} | |" for name, why in LOCAL_FLAGS.items()),
        END,
    ]
    return "\n".join(lines) + "\n"


def _rows() -> Iterator[str]:
    for concern in (*CONCERNS.values(), SEARCH):
        for name, field, opt in options(concern.model):
            flag = flag_name(name, field, concern.prefix)
            if opt.local or concern.section is None:
                where = f"local-only: {opt.local}"
            else:
                where = f"`spec.{to_camel(concern.section)}.{to_camel(opt.benchmark or name)}`"
            default = opt.benchmark_default if opt.benchmark_default is not None else None
            shown = default_of(field) if default is None or opt.local else default
            yield f"| `{flag}` | {where} | {_shown(shown)} |"


def _flag(dest: str) -> str:
    """`--workers`, or `--sim-*` for a model's flags named by their prefix."""
    return f"--{dest[:-1]}-*" if dest.endswith("_") else f"--{dest}"


def _shown(value: object) -> str:
    if value in (None, [], {}):
        return ""
    if isinstance(value, list):
        return ", ".join(f"`{v}`" for v in value)
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


if __name__ == "__main__":
    print(table(), end="")
