"""The words every layer shares and none defines: the run's options (config), the scheduler's
contract with the operator (contract), the wire's keys (keys), token counting (tokens) and the
names and units of the metrics (catalog). The bottom tier: it imports nothing of dagperf, so the
operator and every layer above may read it."""
