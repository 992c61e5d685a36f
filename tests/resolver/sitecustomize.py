"""A name with several addresses, as a headless Service's DNS name has one per pod, for a Python
process a test starts with this directory on PYTHONPATH (Python loads it at start-up): a name
in the JSON hosts file $DAGPERF_TEST_HOSTS resolves to every address listed for it; a name
ending in `.svc` that the file lacks does not resolve; every other name resolves as usual."""

import json
import os
import socket

_HOSTS = os.environ.get("DAGPERF_TEST_HOSTS")
_system_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if _HOSTS and isinstance(name, str) and name.endswith(".svc"):
        try:
            with open(_HOSTS) as hosts:
                addresses = json.load(hosts)[name]
        except (OSError, ValueError, KeyError):
            raise socket.gaierror(socket.EAI_NONAME, f"{name}: no pod backs this Service") from None
        return [info for each in addresses for info in _system_getaddrinfo(each, *args, **kwargs)]
    return _system_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _getaddrinfo
