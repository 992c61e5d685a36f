"""How requests travel: the scheduler-to-worker wire (protocol.py, its messages; channel.py, a
ZeroMQ socket on the event loop) and the worker-to-server HTTP (http1.py, a pooled HTTP/1.1
client; client.py, one timed exchange; sse.py, a stream's events). What a request's body holds
and how its reply reads is its API's (`dagperf.apis`); the graph it comes from is not seen here."""
