"""The worker role: send the requests the scheduler routes here, and hold their histories.

A worker connects a DEALER socket under its identity (a pod name plus a process index, or a
local name), says Hello until the scheduler Welcomes it with the endpoint settings, then serves
credits as they come, each as its own task, and streams results back in batches. Where requests
go and the API key are this worker's own configuration (`options`), never the scheduler's.

- `histories`: when a credit says `keep`, the request's full context (history, its own messages
  and the captured reply) is kept for that many later requests of the same tree run, which the
  scheduler routes to this worker because they share its routing key.
- `armed`: a credit may carry armed credits, requests that continue its history and need nothing
  else. They start here the moment that one succeeds, before its result is even sent, so a FORK
  child or a next turn follows its parent without a round trip; the result names the ones
  started. Results are held back until the armed requests started before them are on the wire.
- `shell`: the `Worker`, the event loop's side: socket, HTTP pool, tasks and timers.
- `wire`: the CURVE-secured sockets to the scheduler, and the heartbeat thread.
- `processes`: `dagperf worker`, one worker or several child processes.

Histories and armed credits are pure and tested without sockets (tests/test_histories.py,
tests/test_armed.py).
"""

from dagperf.worker.options import WorkerConfig
from dagperf.worker.processes import serve_workers
from dagperf.worker.shell import Worker

__all__ = ["Worker", "WorkerConfig", "serve_workers"]
