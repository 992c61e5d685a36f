"""The cluster DNS for Python processes the stand-in node (tests/node.py) starts: a Service name
(`name.namespace.svc[.cluster.local]`) resolves to the address of a pod that backs it, read from
the hosts file the node keeps ($DAGPERF_TEST_HOSTS). Every other name resolves as usual.
Loaded by Python at start-up because the node puts this directory on PYTHONPATH."""

import json
import os
import socket

_HOSTS = os.environ.get("DAGPERF_TEST_HOSTS")
_system_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if (
        _HOSTS
        and isinstance(name, str)
        and (name.endswith(".svc") or name.endswith(".svc.cluster.local"))
    ):
        try:
            with open(_HOSTS) as hosts:
                host = json.load(hosts)[name]
        except (OSError, ValueError, KeyError):
            raise socket.gaierror(socket.EAI_NONAME, f"{name}: no pod backs this Service") from None
    return _system_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _getaddrinfo
