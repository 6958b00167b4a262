"""GPU metric names served by `grill gpu-exporter`, and exporter /metrics text -> canonical GPU samples.

The exporter and the scraper share `GPU_METRICS`, so a name changes in one place. NVIDIA's
dcgm-exporter is read too (its `DCGM_FI_DEV_*` names), for machines that already run it.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from grill_locust.samples import KIND_GPU, Sample, empty_sample

MIB_BYTES = 1024 * 1024


@dataclass(frozen=True)
class GpuMetric:
    field: str  # canonical sample column
    name: str  # Prometheus family name
    kind: str  # "gauge" | "counter"
    help: str


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric(
        "gpu_util_pct",
        "grill_gpu_utilization_percent",
        "gauge",
        "GPU utilisation over the last sample period, %",
    ),
    GpuMetric("mem_used_bytes", "grill_gpu_memory_used_bytes", "gauge", "GPU memory in use, bytes"),
    GpuMetric("mem_total_bytes", "grill_gpu_memory_total_bytes", "gauge", "GPU memory installed, bytes"),
    GpuMetric("power_w", "grill_gpu_power_watts", "gauge", "Board power draw, W"),
    GpuMetric("energy_mj", "grill_gpu_energy_millijoules", "counter", "Energy since the driver loaded, mJ"),
    GpuMetric("temperature_c", "grill_gpu_temperature_celsius", "gauge", "GPU core temperature, degrees C"),
    GpuMetric("sm_clock_mhz", "grill_gpu_sm_clock_mhz", "gauge", "SM clock, MHz"),
    GpuMetric("throttle_reasons", "grill_gpu_throttle_reasons", "gauge", "NVML clocks-event reasons bitmask"),
)
GPU_UP_METRIC = "grill_gpu_up"  # 1 when the last NVML reading of this GPU succeeded, 0 when it failed
GPU_LABELS: tuple[str, ...] = ("host", "gpu", "uuid", "name")


def _sample_name(metric: GpuMetric) -> str:
    return metric.name + "_total" if metric.kind == "counter" else metric.name


GRILL_SAMPLE_FIELDS: dict[str, tuple[str, float]] = {_sample_name(m): (m.field, 1.0) for m in GPU_METRICS}
# dcgm-exporter's default counters (memory in MiB); its labels are gpu, UUID, modelName, Hostname
DCGM_SAMPLE_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB_BYTES),
    "DCGM_FI_DEV_FB_TOTAL": ("mem_total_bytes", MIB_BYTES),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),
}


def parse_gpu_text(text: str, wall_time: float, source: str, backend: str, host: str) -> list[Sample]:
    """One sample per GPU found in an exporter's text (ours or dcgm-exporter's), in GPU order."""
    by_gpu: dict[tuple[str, str], Sample] = {}
    for family in text_string_to_metric_families(text):
        for metric_sample in family.samples:
            labels = metric_sample.labels
            # the parser names every counter sample `<name>_total`, even where the text had no suffix
            dcgm_name = (
                metric_sample.name.removesuffix("_total") if family.type == "counter" else metric_sample.name
            )
            mapping = GRILL_SAMPLE_FIELDS.get(metric_sample.name) or DCGM_SAMPLE_FIELDS.get(dcgm_name)
            if mapping is None:
                continue
            gpu_index = labels.get("gpu", "")
            gpu_uuid = labels.get("uuid", labels.get("UUID", ""))
            gpu_host = labels.get("host", labels.get("Hostname", "")) or host
            key = (gpu_host, gpu_uuid or gpu_index)
            sample = by_gpu.get(key)
            if sample is None:
                sample = empty_sample(KIND_GPU, wall_time, source, backend, gpu_host)
                sample.update(
                    gpu_index=int(gpu_index) if gpu_index.isdigit() else None,
                    gpu_uuid=gpu_uuid or None,
                    gpu_name=labels.get("name", labels.get("modelName")) or None,
                )
                by_gpu[key] = sample
            field, scale = mapping
            sample[field] = float(metric_sample.value) * scale
    return sorted(
        by_gpu.values(), key=lambda s: (str(s["host"]), s["gpu_index"] if s["gpu_index"] is not None else -1)
    )
