"""`dagperf-operator`: kopf's runner with dagperf's handlers, and the two choices that matter.

It talks to the cluster it runs in (its service account) or to $KUBECONFIG, and watches
Benchmarks in every namespace unless --namespace limits it (repeat it for several).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import kopf
        from kubernetes.config import ConfigException
    except ModuleNotFoundError as e:  # installed without the extra that brings them
        return _fail(
            f"needs {e.name}, which the operator extra installs: pip install 'dagperf[operator]'"
        )

    from dagperf_operator import handlers
    from dagperf_operator.kube import api_client
    from dagperf_operator.settings import SettingsError

    try:
        options = handlers.run_options(args.namespace)
    except SettingsError as e:
        return _fail(str(e))
    try:
        api_client()  # kopf would retry a missing config forever: say so once, now
    except (ConfigException, OSError) as e:
        return _fail(f"no cluster to talk to: {e} (set KUBECONFIG, or run in a pod)")

    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    kopf.run(**options, liveness_endpoint=args.liveness or None)
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dagperf-operator",
        description="Run dagperf Benchmarks on Kubernetes: watch Benchmark resources, launch "
        "their scheduler and workers, and report their progress in their status.",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    parser.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        metavar="URL",
        help="where to serve the liveness probe (default: %(default)s)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every step")
    parser.add_argument(
        "--log-format",
        choices=("plain", "json"),
        default="plain",
        help="plain text, or one JSON object per line for a log collector (default: %(default)s)",
    )
    return parser


def _fail(message: str) -> int:
    print(f"dagperf-operator: {message}", file=sys.stderr)
    return 2
