"""The scheduler role: the imperative shell around the engine's dispatcher.

It binds a ROUTER socket, registers workers (Hello / Welcome), watches their heartbeats, feeds
the dispatcher every result and timer, and sends what the dispatcher decides as batched Credits,
Cancels, Disarms and Forgets (`outbox`). Every profiling result becomes a line of
`profile_export.jsonl` as it arrives and a sample of the phase summary; the summary files and the
operator's final report are written when the run ends (`outcome`). /metrics, /status and
POST /stop are served by `status`.

- `options`: how a scheduler listens, waits, reports and judges (`SchedulerOptions`).
- `membership`: its workers: registration, heartbeats, who is lost (over the pure `roster`).
- `timers`: the dispatcher's next deadline, the heartbeat, the wait for cancelled results.
- `shell`: the `Scheduler`, the event loop's side of all of the above.
"""

from dagperf.exports.run import Artifacts
from dagperf.scheduler.options import SchedulerError, SchedulerOptions
from dagperf.scheduler.outcome import Outcome
from dagperf.scheduler.shell import Scheduler

__all__ = ["Artifacts", "Outcome", "Scheduler", "SchedulerError", "SchedulerOptions"]
