"""`grill gpu-exporter`: serve this machine's NVIDIA GPUs on /metrics (and push them to InfluxDB).

Also runs alone, without the rest of grill's commands: `python -m grill_locust.telemetry.cli`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

from grill_locust.errors import GrillError

DEFAULT_PORT = 9835
DEFAULT_INTERVAL_S = 1.0


# each subcommand this module serves, with its one-line help (grill_locust/command.py)
COMMANDS = {"gpu-exporter": "serve NVML GPU metrics for Prometheus / InfluxDB"}


def configure_parser(parser: argparse.ArgumentParser, name: str = "gpu-exporter") -> None:
    parser.add_argument(
        "--host", default=os.environ.get("GRILL_EXPORTER_HOST", "0.0.0.0"), help="address to listen on"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("GRILL_EXPORTER_PORT", DEFAULT_PORT)),
        help="port for /metrics (0: any free port)",
    )
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between NVML readings"
    )
    parser.add_argument(
        "--influx-url",
        default=os.environ.get("GRILL_INFLUX_URL"),
        help="also push grill_gpu points to this InfluxDB",
    )
    parser.add_argument(
        "--influx-org",
        default=os.environ.get("GRILL_INFLUX_ORG", "grill"),
        help="InfluxDB organisation ('-' for 1.8)",
    )
    parser.add_argument(
        "--influx-bucket",
        default=os.environ.get("GRILL_INFLUX_BUCKET", "grill"),
        help="InfluxDB bucket (db/rp for 1.8)",
    )
    parser.add_argument(
        "--influx-token",
        default=os.environ.get("GRILL_INFLUX_TOKEN", ""),
        help="InfluxDB token (env GRILL_INFLUX_TOKEN)",
    )
    parser.add_argument(
        "--duration", type=float, default=0.0, help="stop after this many seconds (0: run until stopped)"
    )


def run(args: argparse.Namespace) -> int:
    from grill_locust.telemetry.exporter import GpuExporter
    from grill_locust.telemetry.nvml import NvmlReader

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.interval <= 0:
        raise GrillError(f"--interval: expected seconds > 0, got {args.interval}")
    reader = NvmlReader()
    gpus = reader.open()
    push = None
    if args.influx_url:
        from grill_locust.telemetry.influx_push import influx_push

        push = influx_push(
            args.influx_url, args.influx_org, args.influx_bucket, args.influx_token, reader.host
        )
    exporter = GpuExporter(
        reader, interval_s=args.interval, on_samples=push.write_telemetry if push else None
    )
    try:
        server, port = exporter.serve(args.host, args.port)
    except OSError as error:
        raise GrillError(
            f"--port {args.port}: cannot listen on {args.host}: {error.strerror or error}"
        ) from error
    names = ", ".join(f"{gpu.index}:{gpu.name}" for gpu in gpus)
    print(
        f"grill gpu-exporter: {len(gpus)} GPU(s) [{names}] on http://{args.host}:{port}/metrics every {args.interval:g} s",
        flush=True,
    )
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        exporter.stop()
        server.shutdown()
        if push is not None:
            push.close()
        reader.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m grill_locust.telemetry.cli`: the same as `grill gpu-exporter`."""
    from grill_locust.command import run_alone

    return run_alone(sys.modules[__name__], "gpu-exporter", argv)


if __name__ == "__main__":
    sys.exit(main())
