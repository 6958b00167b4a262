"""The load generator watches itself: a worker saturated on purpose has its tiers flagged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gevent
import numpy as np
import pandas as pd
import pytest

from grill_locust.run.selfcheck import LagHistogram, SelfCheck
from tests.run.conftest import LOCUSTFILE, only_run_dir, sim_scenario, write_scenario

pytestmark = pytest.mark.slow

# The product's locustfile plus a greenlet that holds the gevent hub 20 ms at a time, as an overloaded
# worker would: Locust's own CPU warning stays silent, our event-loop probe must not.
BURNING_LOCUSTFILE = f"""
import time, gevent
from locust import events
exec(open({str(LOCUSTFILE)!r}).read())

def burn():
    while True:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        gevent.sleep(0.005)

@events.test_start.add_listener
def start_burning(**kw):
    gevent.spawn(burn)
"""


# The product's locustfile plus one stall of the hub, 150 ms (longer than any probe interval, so a probe
# wakes inside it), 3 s into an ~8 s tier at light load, once requests have been in flight for 100 ms
# (the probe counts only a sleep that began and ended with a request in flight): one late probe among
# ~150. It also keeps every lag the probe counted, per window, and writes the longest window (the tier's)
# to LAGS_PATH at exit: the host's own noise decides the rest of the tier's lags, not the test.
ONE_STALL_LOCUSTFILE = f"""
import atexit, json, time, gevent
from locust import events
exec(open({str(LOCUSTFILE)!r}).read())
import grill_locust.run.selfcheck as selfcheck
from grill_locust.run.state import run_state

WINDOWS = []
_add = selfcheck.LagHistogram.add

def recording_add(self, lag_ms):
    if getattr(self, "probe", False):  # the event-loop probe's window, not the read lag's
        if not hasattr(self, "recorded"):
            self.recorded = []
            WINDOWS.append(self.recorded)
        self.recorded.append(lag_ms)
    _add(self, lag_ms)

def marking(method):
    def marked(self, *args, **kwargs):
        method(self, *args, **kwargs)
        self._lags.probe = True
    return marked

selfcheck.LagHistogram.add = recording_add
selfcheck.SelfCheck.__init__ = marking(selfcheck.SelfCheck.__init__)
selfcheck.SelfCheck.new_window = marking(selfcheck.SelfCheck.new_window)
atexit.register(lambda: open("LAGS_PATH", "w").write(json.dumps(max(WINDOWS, key=len))))

def stall_once(worker):
    gevent.sleep(3.0)
    busy_since = None
    while busy_since is None or time.perf_counter() - busy_since < 0.1:
        gevent.sleep(0.005)
        if worker.in_flight == 0:
            busy_since = None
        elif busy_since is None:
            busy_since = time.perf_counter()
    end = time.perf_counter() + 0.15
    while time.perf_counter() < end:
        pass

@events.test_start.add_listener
def start_stalling(environment, **kw):
    gevent.spawn(stall_once, run_state(environment).worker)
"""


def run(
    tmp_path: Path, locustfile: Path, iterations: int = 4
) -> tuple[subprocess.CompletedProcess[str], pd.DataFrame]:
    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40},
        tiers=[2],
        iterations=iterations,
        max_tokens=32,
        sim_args={"step_a_ms": 10.0, "step_b_ms": 0.0},
    )
    data["load"]["think_time_s"] = 0
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(locustfile),
            "--headless",
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "r"),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, pd.read_csv(only_run_dir(tmp_path / "r") / "summary.csv")


def test_a_saturated_worker_is_flagged_live_and_in_the_summary(tmp_path: Path) -> None:
    burning = tmp_path / "burning.py"
    burning.write_text(BURNING_LOCUSTFILE)
    done, summary = run(tmp_path, burning)
    assert "tier 1/1: LOAD GENERATOR SATURATED" in done.stderr
    assert bool(summary["saturated"].iloc[0])
    assert summary["worker_lag_p99_ms"].iloc[0] > 10
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert records["worker_lag_p99_ms"].notna().all() and records["worker_cpu"].notna().any()


def test_one_late_wake_up_in_a_long_tier_is_not_the_tiers_lag_p99(tmp_path: Path) -> None:
    """A lag p99 over the last few dozen probes is near their maximum: one 150 ms stall flagged the whole tier.
    The tier's figure is now the p99 of all its probes, which leaves one late probe among ~150 out,
    though the records just after it saw it."""
    stalling = tmp_path / "stalling.py"
    lags_path = tmp_path / "lags.json"
    stalling.write_text(ONE_STALL_LOCUSTFILE.replace("LAGS_PATH", str(lags_path)))
    done, summary = run(tmp_path, stalling, iterations=20)
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    lags = np.sort(np.array(json.loads(lags_path.read_text())))
    assert len(lags) >= 100 and lags[-1] > 70  # the tier's probes, the stall among them
    # early in the tier, over a few dozen probes, the interpolated p99 lies well up toward their maximum
    assert records["worker_lag_p99_ms"].max() > lags[-1] / 5
    exact_p99 = float(np.quantile(np.maximum(lags, 0.01), 0.99))  # the histogram's first edge: 0.01 ms
    tier_lag = summary["worker_lag_p99_ms"].iloc[0]
    assert max(exact_p99, 0.01) <= tier_lag <= max(exact_p99, 0.01) * 1.02
    assert tier_lag < lags[-1] / 3  # the stall is left out
    saturated = bool(summary["saturated"].iloc[0])
    # judged by the read lag (every read stamped on loopback), which the one stall barely touches
    read_lag = summary["worker_read_lag_p99_ms"].iloc[0]
    assert read_lag == read_lag  # measured
    assert saturated == (read_lag > 5 or summary["worker_cpu_mean"].iloc[0] > 70)
    assert ("tier 1/1: LOAD GENERATOR SATURATED" in done.stderr) == saturated


def test_the_read_lag_is_how_far_event_times_may_be_from_their_arrivals() -> None:
    """An event read alone 30 ms after it arrived is timed by its own stamp (no error); two events 30 ms
    apart that share a read carry the second's stamp, so the first may be 30 ms off, and the tier is
    flagged; a read with no stamp leaves the tier to the event-loop probe."""
    import socket

    from grill_locust.client import _arrival

    check = SelfCheck()
    check.start()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    try:
        stamped = _arrival.enable(client)
        if not stamped:
            pytest.skip("no kernel receive stamps here")
        for _ in range(5):
            server.sendall(b"data: {}\n\n")
            time.sleep(0.03)  # the worker is busy elsewhere while the bytes wait
            _data, arrived = _arrival.read(client, 4096, True, _arrival.wall_offset())
            _arrival.note_read(True, arrived, 1, arrived - 0.05, False)
        lone = check.read_lag_p99_ms
        assert lone is not None and lone < 1.0 and not check.saturated
        looked = time.perf_counter()
        server.sendall(b"data: {}\n\n")
        time.sleep(0.03)
        server.sendall(b"data: {}\n\n")
        time.sleep(0.005)
        _data, arrived = _arrival.read(client, 4096, True, _arrival.wall_offset())
        assert _data.count(b"data:") == 2  # one read, one stamp: the second event's
        _arrival.note_read(True, arrived, 2, looked, True)
        lag = check.read_lag_p99_ms
        assert lag is not None and 29.0 <= lag <= 30.0 * 1.02 + 20.0
        assert check.saturated  # well over 5 ms
        check.new_window()
        _arrival.note_read(True, time.perf_counter(), 1, looked, True)
        assert check.read_lag_p99_ms is not None and check.read_lag_p99_ms < 5.0
        _arrival.note_read(False, time.perf_counter(), 1, looked, False)  # TLS: no stamp
        assert check.read_lag_p99_ms is None
    finally:
        check.stop()
        server.close()
        client.close()
    assert _arrival.read_lag_sink is None  # a stopped check hears nothing


def test_a_late_first_token_flags_the_tier_though_most_events_are_timed_right() -> None:
    """One request in fifty whose first output shared a read with its second (10 ms apart), among
    streams of 16 events read one by one: under 1 % of the events, but 2 % of the first tokens, which
    TTFT is timed by: the tier is flagged."""
    from grill_locust.client import _arrival

    check = SelfCheck()
    check.start()
    try:
        now = time.perf_counter()
        for request in range(50):
            merged = request % 25 == 0
            _arrival.note_read(True, now, 2 if merged else 1, now - (0.010 if merged else 0.0), True)
            for _ in range(15 if merged else 16):
                _arrival.note_read(True, now, 1, now - 0.020, False)
        assert check.read_lag_p99_ms is not None and check.read_lag_p99_ms >= 9.9
        assert check.saturated
    finally:
        check.stop()


def test_reads_made_once_the_run_is_stopping_are_not_its_read_lag() -> None:
    """Locust's stop holds the hub, then says the run is stopping, then cuts the streams: the reads the
    stall delayed are made after it says so, and are the stop's (a full suite's stop test flagged its
    tier through them)."""
    from grill_locust.client import _arrival

    state = {"stopping": False}
    check = SelfCheck(busy=lambda: not state["stopping"])
    check.start()
    try:
        now = time.perf_counter()
        _arrival.note_read(True, now, 2, now - 0.001, True)
        before = check.read_lag_p99_ms
        assert before is not None and before < 5.0
        state["stopping"] = True
        for _ in range(5):
            now = time.perf_counter()
            _arrival.note_read(True, now, 2, now - 0.2, True)  # two events 200 ms apart in one read
        _arrival.note_read(False, time.perf_counter(), 1, now, False)
        assert check.read_lag_p99_ms == before
    finally:
        check.stop()


def test_the_lag_histogram_answers_the_interpolated_percentile_within_two_percent() -> None:
    rng = np.random.default_rng(7)
    for lags in (rng.gamma(2.0, 0.5, 1000), rng.exponential(3.0, 57), np.array([0.0, 0.0, 0.3])):
        histogram = LagHistogram()
        for lag in lags:
            histogram.add(float(lag))
        for q in (0.5, 0.9, 0.99):
            # numpy's linear interpolation; a lag below the first bucket's edge counts as that edge
            exact = float(np.quantile(np.maximum(lags, LagHistogram.FIRST_EDGE_MS), q))
            answer = histogram.percentile_ms(q * 100)
            assert answer is not None
            assert (
                max(exact, LagHistogram.FIRST_EDGE_MS)
                <= answer
                <= max(exact, LagHistogram.FIRST_EDGE_MS) * 1.02
            )
    # 1 % may lie above the p99: two stalls among 300 probes are left out, four are not
    for stalls, expected_high in ((2, False), (4, True)):
        histogram = LagHistogram()
        for lag in [1.0] * (300 - stalls) + [60.0] * stalls:
            histogram.add(lag)
        assert (histogram.percentile_ms(99) > 5) is expected_high
    assert LagHistogram().percentile_ms(99) is None


def test_a_new_window_forgets_the_last_tiers_lag() -> None:
    check = SelfCheck()
    check.start()
    try:
        gevent.sleep(0.1)  # the probe runs, and sleeps
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:
            pass
        gevent.sleep(0.1)
        stalled = check.lag_p99_ms
        assert stalled is not None and stalled > 50
        check.new_window()
        assert check.lag_p99_ms is None
        gevent.sleep(0.3)
        # below the stall's own figure, which a window still holding it could not be (a fixed 50 ms
        # bound over these ~6 probes was their maximum: one late wake-up on a loaded host broke it)
        assert check.lag_p99_ms is not None and check.lag_p99_ms < stalled
    finally:
        check.stop()


@pytest.mark.parametrize("stopping", [False, True])
def test_a_stall_that_ends_in_the_stop_is_not_lag(stopping: bool) -> None:
    """The probe counts a stall only if requests were in flight when it slept and still are when it
    wakes: Locust's `Runner.stop()` holds the hub, then (test_stopping) the worker says it is stopping."""
    state = {"stopping": False}
    check = SelfCheck(busy=lambda: not state["stopping"])
    check.start()
    try:
        gevent.sleep(0.3)  # a few quiet probes
        quiet = check.lag_p99_ms
        assert quiet is not None and quiet < 100  # below what the stall gives, so that the two cases differ
        # hold the hub 200 ms, as the stop does: longer than any probe interval, so the probe's wake-up
        # falls inside the stall and comes at least 125 ms late
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            pass
        state["stopping"] = stopping
        gevent.sleep(0.2)  # the probe wakes late
        assert check.lag_p99_ms is not None
        if stopping:
            assert check.lag_p99_ms == quiet
        else:
            assert check.lag_p99_ms > 100
    finally:
        check.stop()
