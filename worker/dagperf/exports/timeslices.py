"""`profile_export_aiperf_timeslices.json` and `.csv`: the run in windows of `--slice-duration`.

Each request falls in the window its start falls in, counted from the first request's start; a
window reports its requests, errors (the endpoint's; requests the run cut short are counted
apart), throughput and each metric's statistics, so a trend (a server warming up, slowing down,
a queue building) shows where one summary would hide it. The last window may be shorter than the
others. The windows are computed after the run from
`profile_export.jsonl`, in one pass, so the request path does no extra work.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import msgspec

from dagperf.exports.aiperf_config import aiperf_input_config
from dagperf.exports.files import whole_or_nothing
from dagperf.metrics.summary import Distribution
from dagperf.vocabulary import catalog

STATS = ("avg", "min", "max", "p50", "p90", "p95", "p99")
# What each window counts (in its CSV's order), and its throughput.
COUNTS = (catalog.REQUEST_COUNT, catalog.ERROR_REQUEST_COUNT, catalog.CUT_REQUEST_COUNT)
THROUGHPUT = catalog.REQUEST_THROUGHPUT


class _Slice:
    __slots__ = ("cut", "distributions", "errors", "last_end_ns", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0  # the endpoint's failures
        self.cut = 0  # cut short by the run itself: neither a success nor an error
        self.last_end_ns = 0
        self.distributions: dict[str, Distribution] = {}

    def add(self, record: dict[str, Any]) -> None:
        self.requests += 1
        self.last_end_ns = max(self.last_end_ns, record["metadata"]["request_end_ns"])
        if record["error"] is not None:
            cut = record["metadata"].get("cut") is not None
            self.cut += cut
            self.errors += not cut
            return
        for name, metric in record["metrics"].items():
            if name not in catalog.RECORD:
                continue
            distribution = self.distributions.get(name)
            if distribution is None:
                distribution = self.distributions[name] = Distribution()
            value = metric["value"]
            for one in value if isinstance(value, list) else (value,):
                distribution.add(one)


def timeslices(records: Path, first_start_ns: int, slice_s: float) -> list[dict[str, Any]]:
    """Every window with a request in it, in order."""
    decode = msgspec.json.Decoder().decode
    width = int(slice_s * 1e9)
    slices: dict[int, _Slice] = {}
    with records.open("rb") as f:
        for line in f:
            record = decode(line)
            index = max(0, (record["metadata"]["request_start_ns"] - first_start_ns) // width)
            slices.setdefault(index, _Slice()).add(record)
    out = []
    for index in sorted(slices):
        counted = slices[index]
        entry: dict[str, Any] = {
            "timeslice_index": index,
            "start_s": index * slice_s,
            "end_s": (index + 1) * slice_s,
            catalog.REQUEST_COUNT.name: counted.requests,
            catalog.ERROR_REQUEST_COUNT.name: counted.errors,
            catalog.CUT_REQUEST_COUNT.name: counted.cut,
            THROUGHPUT.name: {"unit": THROUGHPUT.unit, "avg": counted.requests / slice_s},
        }
        for name, distribution in counted.distributions.items():
            stats = distribution.stats()
            entry[name] = {"unit": catalog.RECORD[name].unit} | {k: stats[k] for k in STATS}
        out.append(entry)
    return out


def write_timeslices(
    directory: Path, slices: list[dict[str, Any]], input_config: dict[str, Any]
) -> None:
    with whole_or_nothing(directory / "profile_export_aiperf_timeslices.json") as f:
        document = {
            "timeslices": slices,
            "input_config": aiperf_input_config(input_config),
            "dagperf_config": input_config,
        }
        f.write(json.dumps(document, indent=2) + "\n")
    with whole_or_nothing(directory / "profile_export_aiperf_timeslices.csv", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Timeslice", "Metric", "Unit", "Stat", "Value"])
        for entry in slices:
            index = entry["timeslice_index"]
            for metric in COUNTS:
                out.writerow([index, metric.label, metric.unit, "count", entry[metric.name]])
            throughput = f"{entry[THROUGHPUT.name]['avg']:.2f}"
            out.writerow([index, THROUGHPUT.label, THROUGHPUT.unit, "avg", throughput])
            for name, metric in catalog.RECORD.items():
                if name in entry:
                    for stat in STATS:
                        value = entry[name][stat]
                        out.writerow([index, metric.label, metric.unit, stat, f"{value:.2f}"])
