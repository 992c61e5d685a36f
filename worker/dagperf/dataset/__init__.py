"""Dataset files read into validated data for `dagperf.graph`: one module per format under
`formats/` (with the table of formats), beside the pieces every format shares (problems and
files in `loader`, bounds in `limits`, session specs in `specs`, synthetic text in `text` and
`prompts`, request content, CSV tables and progress lines)."""

from dagperf.dataset.loader import MAX_PROBLEMS, DatasetError, Problem

__all__ = ["MAX_PROBLEMS", "DatasetError", "Problem"]
