#!/usr/bin/env bash
# Real-GPU check of `grill gpu-exporter` (issue 7): start the exporter, load GPU 0 with a PyTorch bf16
# matmul for ~30 s, scrape /metrics throughout, and check that utilisation rises, memory and power move
# and the energy counter increases. Prints PASS/FAIL lines; exit 0 only when every check passes.
#   bench/gpu_check.sh            (env: PYTHON, GRILL_CHECK_PORT=9835, GRILL_CHECK_LOAD_S=30)
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PORT=${GRILL_CHECK_PORT:-9835}
LOAD_S=${GRILL_CHECK_LOAD_S:-30}
WORK=$(mktemp -d)
trap 'kill "$EXPORTER_PID" 2>/dev/null; wait "$EXPORTER_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
EXPORTER_PID=""

echo "== machine"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv,noheader
else
  echo "nvidia-smi not found"
fi
"$PY" --version

echo "== python packages (installing only what is missing)"
need() {  # need MODULE PACKAGE: install PACKAGE only when MODULE does not import
  module=$1 package=$2
  if "$PY" -c "import $module" 2>/dev/null; then
    echo "have $package $("$PY" -c "from importlib.metadata import version; print(version('$package'))" 2>/dev/null)"
  else
    echo "installing $package"
    "$PY" -m pip install -q "$package" || { echo "FAIL setup: cannot install $package"; exit 2; }
  fi
}
need pynvml nvidia-ml-py
need prometheus_client prometheus-client

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # torch's cuda:0 is NVML's GPU 0
echo "== exporter"
"$PY" -m grill_locust.telemetry.cli --host 127.0.0.1 --port "$PORT" --interval 0.5 \
  --duration $((LOAD_S + 60)) >"$WORK/exporter.log" 2>&1 &
EXPORTER_PID=$!
for _ in $(seq 20); do  # no GPU or driver: the exporter says so and exits 2; stop before fetching torch
  grep -q "/metrics every" "$WORK/exporter.log" 2>/dev/null && break
  if ! kill -0 "$EXPORTER_PID" 2>/dev/null; then
    echo "FAIL setup: $(tail -n 1 "$WORK/exporter.log")"
    exit 2
  fi
  sleep 0.5
done
cat "$WORK/exporter.log"
need torch torch

"$PY" - "$PORT" "$LOAD_S" "$EXPORTER_PID" <<'PYEOF'
"""Scrape the exporter while a matmul loads GPU 0; judge the readings."""

import os
import subprocess
import sys
import time
import urllib.request

from grill_locust.telemetry.gpu_metrics import parse_gpu_text

port, load_s, exporter_pid = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
URL = f"http://127.0.0.1:{port}/metrics"
GIB = 1024**3
LOAD = r"""
import sys, time, torch
load_s = float(sys.argv[1])
device = torch.device("cuda:0")
ballast = torch.empty(int(16 * 1024**3), dtype=torch.uint8, device=device)  # 16 GiB: memory must move
n = 8192
a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
torch.cuda.synchronize()
start = time.perf_counter(); products = 0
while time.perf_counter() - start < load_s:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize(); products += 20
elapsed = time.perf_counter() - start
print(f"load: {products} bf16 {n}^3 matmuls in {elapsed:.1f} s = {2 * n**3 * products / elapsed / 1e12:.0f} TFLOP/s", flush=True)
"""


def scrape() -> dict | None:
    try:
        with urllib.request.urlopen(URL, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    samples = [s for s in parse_gpu_text(text, time.time(), f"127.0.0.1:{port}", "", "") if s["gpu_index"] == 0]
    return samples[0] if samples else None


def collect(seconds: float, phase: str, into: list) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sample = scrape()
        if sample is not None:
            sample["phase"] = phase
            into.append(sample)
        time.sleep(0.5)


deadline = time.monotonic() + 30
while scrape() is None:
    if time.monotonic() > deadline:
        print("FAIL exporter: /metrics did not answer with GPU 0 within 30 s")
        sys.exit(1)
    try:
        os.kill(exporter_pid, 0)
    except OSError:
        print("FAIL exporter: exited early (see its log below)")
        sys.exit(1)
    time.sleep(0.5)
first = scrape()
print(f"exporter up: GPU 0 = {first['gpu_name']} ({first['gpu_uuid']}) on {first['host']}")

samples: list = []
collect(5.0, "idle", samples)
load = subprocess.Popen([sys.executable, "-c", LOAD, str(load_s)])
load_started = time.monotonic()
collect(load_s + 8.0, "load", samples)  # covers CUDA start-up too
load.wait(timeout=120)
collect(4.0, "after", samples)


def values(phase: str, field: str) -> list[float]:
    return [s[field] for s in samples if s["phase"] == phase and s[field] is not None]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


idle_util, load_util = values("idle", "gpu_util_pct"), values("load", "gpu_util_pct")
idle_mem, load_mem = values("idle", "mem_used_bytes"), values("load", "mem_used_bytes")
idle_power, load_power = values("idle", "power_w"), values("load", "power_w")
energy = [(s["wall_time"], s["energy_mj"]) for s in samples if s["energy_mj"] is not None]
print(f"samples: idle {len(idle_util)}, load {len(load_util)}, after {len(values('after', 'gpu_util_pct'))}")
print(f"utilisation %: idle mean {mean(idle_util):.1f}, load mean {mean(load_util):.1f}, load max {max(load_util, default=float('nan')):.0f}")
print(f"memory used GiB: idle {mean(idle_mem) / GIB:.2f}, load peak {max(load_mem, default=0) / GIB:.2f}, total {first['mem_total_bytes'] / GIB:.1f}")
print(f"power W: idle mean {mean(idle_power):.0f}, load mean {mean(load_power):.0f}, load max {max(load_power, default=float('nan')):.0f}")
print(f"temperature C: idle {mean(values('idle', 'temperature_c')):.0f}, load max {max(values('load', 'temperature_c'), default=float('nan')):.0f}")
print(f"SM clock MHz: idle {mean(values('idle', 'sm_clock_mhz')):.0f}, load max {max(values('load', 'sm_clock_mhz'), default=float('nan')):.0f}")
print(f"throttle reasons seen under load: {sorted({int(x) for x in values('load', 'throttle_reasons')})}")

checks = []
checks.append(("utilisation rises", max(load_util, default=0) >= 80 and mean(load_util) > mean(idle_util) + 30,
               f"load max {max(load_util, default=0):.0f} % (>= 80), mean +{mean(load_util) - mean(idle_util):.0f} points (> 30)"))
mem_rise = max(load_mem, default=0) - mean(idle_mem)
checks.append(("memory moves", mem_rise >= 8 * GIB, f"+{mem_rise / GIB:.1f} GiB under load (>= 8 GiB; the load holds 16 GiB)"))
power_rise = mean(load_power) - mean(idle_power)
checks.append(("power moves", power_rise >= 50, f"load mean {power_rise:+.0f} W over idle (>= 50 W)"))
if len(energy) >= 2:
    (t0, e0), (t1, e1) = energy[0], energy[-1]
    energy_j = (e1 - e0) / 1000.0
    checks.append(("energy increases", e1 > e0 and all(b[1] >= a[1] for a, b in zip(energy, energy[1:])),
                   f"{energy_j:.0f} J over {t1 - t0:.1f} s, never decreasing"))
    powered = [(s["wall_time"], s["power_w"]) for s in samples if s["power_w"] is not None]
    integral_j = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(powered, powered[1:]))
    ratio = energy_j / integral_j if integral_j else float("nan")
    checks.append(("energy matches power over time", 0.7 <= ratio <= 1.3,
                   f"energy counter {energy_j:.0f} J vs integral of power {integral_j:.0f} J (ratio {ratio:.2f}, 0.7..1.3)"))
else:
    checks.append(("energy increases", False, "no energy readings (nvmlDeviceGetTotalEnergyConsumption unsupported?)"))
for name, ok, detail in checks:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
failed = sum(1 for _, ok, _ in checks if not ok)
print(f"RESULT: {'PASS' if not failed else 'FAIL'} ({len(checks) - failed}/{len(checks)} checks passed)")
sys.exit(1 if failed else 0)
PYEOF
status=$?
echo "== exporter log (tail)"
tail -n 5 "$WORK/exporter.log"
exit $status
