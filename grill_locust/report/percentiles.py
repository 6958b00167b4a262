"""The percentile figures of a tier, in one place: which per-request metrics, at which quantiles. The
summary (aggregate.py) computes them; the bootstrap (confidence.py) gives each its interval."""

from __future__ import annotations

QUANTILES: tuple[int, ...] = (50, 90, 95, 99)  # p95: an SLO's `percentile` may name it
# summary name -> record column; ITL is the distribution of each request's mean inter-token gap
LATENCY_METRICS: dict[str, str] = {
    "ttft": "ttft_s",
    "ttfo": "ttfo_s",
    "tpot": "tpot_s",
    "itl": "itl_mean_s",
    "e2e": "e2e_s",
}
# summary name -> record column: per-request output tokens / E2E, and the answer's own streaming rate
REQUEST_RATE_METRICS: dict[str, str] = {
    "request_tokens_per_s": "tokens_per_s",
    "request_visible_tokens_per_s": "visible_tokens_per_s",
}


def percentile_figures() -> dict[str, tuple[str, int]]:
    """Summary column -> (record column, quantile in percent), in table order."""
    figures: dict[str, tuple[str, int]] = {}
    for name, column in LATENCY_METRICS.items():
        figures.update({f"{name}_p{q}_s": (column, q) for q in QUANTILES})
    for name, column in REQUEST_RATE_METRICS.items():
        figures.update({f"{name}_p{q}": (column, q) for q in QUANTILES})
    return figures
