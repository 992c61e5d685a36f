"""Process plumbing every role shares: children that die with their parent (`lifeline`), the
event loop (`loops`), garbage-collector pauses around bulk loading (`gcpause`) and log set-up
(`logs`). Nothing here knows about benchmarks."""
