"""The cluster DNS for Python processes the stand-in node (tests/node.py) starts: a Service name
(`name.namespace.svc[.cluster.local]`) resolves to the address of a pod that backs it, read from
the hosts file the node keeps ($DAGPERF_TEST_HOSTS); a list there is a headless Service, one
address per pod, all returned. A name without a dot is tried first as a Service of the pod's
namespace ($DAGPERF_TEST_NAMESPACE), as the cluster DNS's search path does. Every other name
resolves as usual. Loaded by Python at start-up because the node (or a test) puts this
directory on PYTHONPATH."""

import json
import os
import socket

_HOSTS = os.environ.get("DAGPERF_TEST_HOSTS")
_NAMESPACE = os.environ.get("DAGPERF_TEST_NAMESPACE")
_system_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if _HOSTS and _NAMESPACE and isinstance(name, str) and name and "." not in name:
        try:
            with open(_HOSTS) as hosts:
                if f"{name}.{_NAMESPACE}.svc" in json.load(hosts):
                    name = f"{name}.{_NAMESPACE}.svc"
        except (OSError, ValueError):
            pass
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
        if isinstance(host, list):
            return [info for each in host for info in _system_getaddrinfo(each, *args, **kwargs)]
    return _system_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _getaddrinfo
