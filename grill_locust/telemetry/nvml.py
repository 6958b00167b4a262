"""NVML readings -> canonical GPU samples, through nvidia-ml-py (module `pynvml`).

`NvmlReader` takes the `pynvml` module as a parameter: tests hand it a fake at that boundary. A field
a GPU does not support is None; any other NVML error skips that GPU for the round (logged once when
it starts failing and once when it recovers), and the other GPUs are still read.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from grill_locust.errors import GrillError
from grill_locust.samples import KIND_GPU, Sample, empty_sample

log = logging.getLogger(__name__)

MILLIWATTS_PER_WATT = 1000.0


class NvmlUnavailable(GrillError):
    """No NVML library, no driver or no GPU: the exporter cannot run here."""


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    handle: object


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_nvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as error:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from error
    return pynvml


class NvmlReader:
    """Opens NVML once, then reads every GPU on each `read()`."""

    def __init__(self, nvml: ModuleType | None = None, host: str | None = None) -> None:
        self.nvml = nvml if nvml is not None else load_nvml()
        self.host = host or socket.gethostname()
        self.gpus: list[GpuInfo] = []
        self._failing: set[int] = set()

    def open(self) -> list[GpuInfo]:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound as error:
            raise NvmlUnavailable("NVML library not found: no NVIDIA driver on this machine") from error
        except nvml.NVMLError_DriverNotLoaded as error:
            raise NvmlUnavailable("NVIDIA driver not loaded: no NVIDIA GPU usable on this machine") from error
        except nvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML could not start: {error}") from error
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML found no NVIDIA GPU on this machine")
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            name = _text(nvml.nvmlDeviceGetName(handle))
            self.gpus.append(GpuInfo(index=index, uuid=uuid, name=name, handle=handle))
        return self.gpus

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def read(self, wall_time: float | None = None) -> tuple[list[Sample], list[GpuInfo]]:
        """(samples of the GPUs read, GPUs that failed this round)."""
        now = time.time() if wall_time is None else wall_time
        samples: list[Sample] = []
        failed: list[GpuInfo] = []
        for gpu in self.gpus:
            try:
                samples.append(self._read_gpu(gpu, now))
            except self.nvml.NVMLError as error:
                failed.append(gpu)
                if gpu.index not in self._failing:
                    self._failing.add(gpu.index)
                    log.error(
                        "gpu-exporter: GPU %d (%s) failed to read: %s; still serving the others",
                        gpu.index,
                        gpu.uuid,
                        error,
                    )
                continue
            if gpu.index in self._failing:
                self._failing.discard(gpu.index)
                log.warning("gpu-exporter: GPU %d (%s) reads again", gpu.index, gpu.uuid)
        return samples, failed

    def _optional(self, getter: str, *args: object) -> Any:
        """A reading the GPU may not support: None for NotSupported, other errors propagate."""
        function = getattr(self.nvml, getter, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self.nvml.NVMLError_NotSupported:
            return None

    def _read_gpu(self, gpu: GpuInfo, wall_time: float) -> Sample:
        nvml, handle = self.nvml, gpu.handle
        sample = empty_sample(KIND_GPU, wall_time, self.host, "", self.host)
        sample.update(gpu_index=gpu.index, gpu_uuid=gpu.uuid, gpu_name=gpu.name)
        utilization = self._optional("nvmlDeviceGetUtilizationRates", handle)
        memory = self._optional("nvmlDeviceGetMemoryInfo", handle)
        power_mw = self._optional("nvmlDeviceGetPowerUsage", handle)
        reasons = self._optional("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:  # drivers before 535 only have the older name
            reasons = self._optional("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        sample.update(
            gpu_util_pct=float(utilization.gpu) if utilization is not None else None,
            mem_used_bytes=float(memory.used) if memory is not None else None,
            mem_total_bytes=float(memory.total) if memory is not None else None,
            power_w=power_mw / MILLIWATTS_PER_WATT if power_mw is not None else None,
            energy_mj=_float(self._optional("nvmlDeviceGetTotalEnergyConsumption", handle)),
            temperature_c=_float(
                self._optional("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
            ),
            sm_clock_mhz=_float(self._optional("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)),
            throttle_reasons=_float(reasons),
        )
        return sample


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
