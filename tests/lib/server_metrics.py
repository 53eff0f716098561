"""Helpers of the CLI tests that drive `hiq serve` from Python: /metrics values, and waiting for one."""
import time
import urllib.request


def metric(base, name):
    """The value of the first /metrics line for `name` (give a labelled series in full), or 0."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_for(predicate, what):
    """Polls `predicate` for up to a minute; a condition that never holds fails the test."""
    for _ in range(6000):
        if predicate():
            return
        time.sleep(0.01)
    raise SystemExit(f"FAIL: {what} never happened")
