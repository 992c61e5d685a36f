"""`dagperf search`: the highest load that still meets the service-level objectives.

- `objectives`: `--slo "METRIC:STAT:VALUE ..."`, read and judged against a run's summary.
- `plan`: which load to try next (bracketing by doubling, then bisection; or a fixed sweep),
  pure and tested without running anything.
- `runner`: each step a full local run in a directory of its own, `search_results.json` kept
  current after every step, and the table of steps.
"""
