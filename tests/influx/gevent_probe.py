"""Run by test_influx_sink.py in its own process: the sink under gevent monkey-patching, as in Locust.

Writes batches of records from a greenlet every 50 ms while another greenlet measures how late the event
loop wakes it; prints one JSON line: written, dropped, the slowest write call and the loop lag.
Usage: python gevent_probe.py URL BATCHES BATCH_SIZE WAIT_FOR_FLUSH_S
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
from influx_dataset import make_record, records_of  # noqa: E402

from grill_locust.sinks.influx import InfluxSink  # noqa: E402

PROBE_INTERVAL_S = 0.01


def main() -> None:
    url, batches, batch_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    wait_for_flush_s = float(sys.argv[4])
    sink = InfluxSink(url, "org", "bucket", "probe-secret-token", "probe-worker", flush_interval_s=0.2)
    lags_s: list[float] = []
    running = True

    def probe() -> None:
        while running:
            before = time.perf_counter()
            gevent.sleep(PROBE_INTERVAL_S)
            lags_s.append(time.perf_counter() - before - PROBE_INTERVAL_S)

    def produce() -> list[float]:
        call_times_s = []
        start_s = time.time()
        for batch in range(batches):
            records = [
                make_record(
                    record_id=f"{batch}-{i}", run_id="gevent-probe", wall_start=start_s + batch + i / 1000
                )
                for i in range(batch_size)
            ]
            before = time.perf_counter()
            sink.write_records(records_of(records))
            call_times_s.append(time.perf_counter() - before)
            gevent.sleep(0.05)
        return call_times_s

    prober = gevent.spawn(probe)
    call_times_s = gevent.spawn(produce).get()
    deadline = time.monotonic() + wait_for_flush_s
    while sink.buffered() and time.monotonic() < deadline:
        gevent.sleep(0.05)
    before_close = time.perf_counter()
    sink.close(timeout_s=2.0)
    close_s = time.perf_counter() - before_close
    running = False
    prober.join()
    lags_s.sort()
    print(
        json.dumps(
            {
                "written": sink.written,
                "dropped": sink.dropped,
                "max_call_ms": max(call_times_s) * 1000,
                "lag_p99_ms": lags_s[int(len(lags_s) * 0.99)] * 1000,
                "lag_max_ms": lags_s[-1] * 1000,
                "close_s": close_s,
            }
        )
    )


if __name__ == "__main__":
    main()
