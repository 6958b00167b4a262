"""95 % bootstrap intervals of the tier figures, over conversations, and the difference of two runs.

A tier's conversations are resampled with replacement (every request of a drawn conversation comes
with it: turns of one conversation are not independent) and each figure is computed again on the
resample; the interval is the 2.5th and 97.5th percentiles of RESAMPLES such figures. Percentiles are
exact on each resample (numpy's linear interpolation of the resampled requests, as the tier's own):
each is looked for in a window of the sorted values around the tier's own, the whole range where the
window misses. A tier of more than MAX_UNITS conversations deals them at random into MAX_UNITS groups
and resamples the groups (groups of independent conversations are independent: the same spread, at a
bounded cost). The generator is seeded by the run, target and tier, so a report is reproducible and
two runs' resamples are independent. Fewer than two conversations: no interval.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
RESAMPLES = 1000
MAX_UNITS = 2000  # resampled units per tier (conversations, or groups of them above this)
SEED = 21
WINDOW_SIGMAS = 5.0  # a resampled percentile is looked for this many standard deviations around the tier's

# summary column -> (record column, quantile): percentiles of successful requests
PERCENTILE_FIGURES: dict[str, tuple[str, float]] = {}
for _name, _column in {
    "ttft": "ttft_s",
    "ttfo": "ttfo_s",
    "tpot": "tpot_s",
    "itl": "itl_mean_s",
    "e2e": "e2e_s",
}.items():
    for _q in (50, 90, 99):
        PERCENTILE_FIGURES[f"{_name}_p{_q}_s"] = (_column, _q / 100.0)
for _name, _column in {
    "request_tokens_per_s": "tokens_per_s",
    "request_visible_tokens_per_s": "visible_tokens_per_s",
}.items():
    for _q in (50, 90, 99):
        PERCENTILE_FIGURES[f"{_name}_p{_q}"] = (_column, _q / 100.0)

# summary column -> (numerator sum, denominator sum, scale): a ratio of per-conversation sums ("span":
# the tier's span in seconds, the same for every resample); the sums are SUM_COLUMNS
RATIO_FIGURES: dict[str, tuple[str, str, float]] = {
    "success_rate": ("ok", "judged", 1.0),
    "output_tokens_per_s": ("ok_output_tokens", "span", 1.0),
    "visible_output_tokens_per_s": ("ok_visible_tokens", "span", 1.0),
    "requests_per_s": ("ok", "span", 1.0),
    "cached_token_ratio": ("cached_tokens", "cache_prompt_tokens", 1.0),
    "prompt_tokens_mean": ("ok_prompt_tokens", "ok_with_prompt", 1.0),
    "output_tokens_mean": ("ok_output_tokens", "ok", 1.0),
    "abandoned_pct": ("abandoned", "autocomplete", 100.0),
    "shown_in_budget_pct": ("shown_in_budget", "autocomplete", 100.0),
}
FIGURES: tuple[str, ...] = (*PERCENTILE_FIGURES, *RATIO_FIGURES)
# what `grill compare` judges at each tier
HEADLINE_FIGURES: tuple[str, ...] = ("ttft_p50_s", "ttft_p90_s", "e2e_p50_s", "output_tokens_per_s")
NO_SIGNIFICANT_DIFFERENCE = "no significant difference"

# the per-request columns the figures need (a frame from report.aggregate's _Stats)
NEEDED_COLUMNS: tuple[str, ...] = (
    "conversation",
    "ok",
    "cancelled",
    "abandoned",
    "autocomplete",
    "shown_in_budget",
    "output_tokens",
    "reasoning_tokens",
    "prompt_tokens",
    "cached_tokens",
)


def lo_column(figure: str) -> str:
    return f"{figure}_lo"


def hi_column(figure: str) -> str:
    return f"{figure}_hi"


def with_interval_columns(columns: list[str]) -> list[str]:
    """Summary columns with `<figure>_lo`, `<figure>_hi` right after each figure that has an interval."""
    out: list[str] = []
    for column in columns:
        out.append(column)
        if column in FIGURES:
            out += [lo_column(column), hi_column(column)]
    return out


INTERVAL_COLUMNS: list[str] = [c for f in FIGURES for c in (lo_column(f), hi_column(f))]


@dataclass(frozen=True)
class TierResamples:
    """One tier's figures on each of RESAMPLES resamples of its conversations (figure -> array)."""

    conversations: int
    figures: Mapping[str, np.ndarray]


def tier_seed(run_id: str, target: str, tier_index: int) -> int:
    return SEED ^ zlib.crc32(f"{run_id}\x1f{target}\x1f{tier_index}".encode())


def resample_tier(
    frame: pd.DataFrame, span_s: float, seed: int, resamples: int = RESAMPLES
) -> TierResamples | None:
    """The figures of one tier's requests (NEEDED_COLUMNS and the percentile columns, our own stop's
    cuts included: they count nowhere) on each resample; None below two conversations."""
    codes, names = pd.factorize(frame["conversation"], use_na_sentinel=False)
    conversations = len(names)
    if conversations < 2:
        return None
    rng = np.random.default_rng(seed)
    units = conversations
    if units > MAX_UNITS:
        codes = rng.permutation(conversations)[codes] % MAX_UNITS
        units = MAX_UNITS
    weights = _multinomial_weights(rng, resamples, units)  # units x resamples
    kept = ~frame["cancelled"].to_numpy(dtype=bool)
    ok = frame["ok"].to_numpy(dtype=bool) & kept
    out: dict[str, np.ndarray] = {}
    sums = _unit_sums(frame, codes, units, ok, kept)
    totals = np.vstack(list(sums.values())).astype(weights.dtype) @ weights
    total = dict(zip(sums, totals.astype("float64"), strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        for figure, (numerator, denominator, scale) in RATIO_FIGURES.items():
            below = np.full(resamples, span_s) if denominator == "span" else total[denominator]
            if numerator not in total:  # no value in any request (reasoning tokens never counted)
                continue
            below = np.where(below > 0, below, np.nan)
            out[figure] = scale * total[numerator] / below
    for column in {column for column, _ in PERCENTILE_FIGURES.values()}:
        values = frame[column].to_numpy(dtype="float64")
        present = ok & ~np.isnan(values)
        if not present.any():
            continue
        wanted = {f: q for f, (c, q) in PERCENTILE_FIGURES.items() if c == column}
        found = _resampled_quantiles(values[present], codes[present], units, weights, list(wanted.values()))
        out.update(zip(wanted, found, strict=True))
    return TierResamples(conversations, out)


def _multinomial_weights(rng: np.random.Generator, resamples: int, units: int) -> np.ndarray:
    """How often each unit is drawn in each resample: units x resamples, each column summing to units
    (a unit's row is contiguous: the quantile search gathers rows)."""
    draws = rng.integers(0, units, size=(resamples, units))
    counts = np.bincount(
        (draws * resamples + np.arange(resamples)[:, None]).ravel(), minlength=units * resamples
    )
    return counts.reshape(units, resamples).astype("float32")  # counts: exact, and half the memory


def _unit_sums(
    frame: pd.DataFrame, codes: np.ndarray, units: int, ok: np.ndarray, kept: np.ndarray
) -> dict[str, np.ndarray]:
    """Per-unit sums the ratio figures are made of (a sum no request has a value for is left out)."""

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(codes, weights=values.astype("float64"), minlength=units)

    def column(name: str) -> np.ndarray:
        return frame[name].to_numpy(dtype="float64")

    abandoned = frame["abandoned"].to_numpy(dtype=bool) & kept
    autocomplete = frame["autocomplete"].to_numpy(dtype=bool) & kept
    output = np.where(ok, np.nan_to_num(column("output_tokens")), 0.0)
    visible = np.where(ok, column("output_tokens") - column("reasoning_tokens"), 0.0)
    prompt, cached = column("prompt_tokens"), column("cached_tokens")
    both = ok & ~np.isnan(prompt) & ~np.isnan(cached)
    with_prompt = ok & ~np.isnan(prompt)
    sums = {
        "ok": total(ok),
        "judged": total(kept & ~abandoned),
        "ok_output_tokens": total(output),
        "cached_tokens": total(np.where(both, cached, 0.0)),
        "cache_prompt_tokens": total(np.where(both, prompt, 0.0)),
        "ok_prompt_tokens": total(np.where(with_prompt, prompt, 0.0)),
        "ok_with_prompt": total(with_prompt),
        "abandoned": total(abandoned),
        "autocomplete": total(autocomplete),
        "shown_in_budget": total(frame["shown_in_budget"].to_numpy(dtype=bool) & autocomplete),
    }
    if not np.isnan(visible[ok]).all():
        sums["ok_visible_tokens"] = total(np.nan_to_num(visible))
    return sums


def _resampled_quantiles(
    values: np.ndarray, codes: np.ndarray, units: int, weights: np.ndarray, quantiles: list[float]
) -> list[np.ndarray]:
    """Each quantile of each resample, where resample b holds request i weights[codes[i], b] times."""
    order = np.argsort(values, kind="stable")
    sorted_values, sorted_codes = values[order], codes[order]
    per_unit = np.bincount(codes, minlength=units).astype(weights.dtype)
    drawn = (per_unit @ weights).astype("float64")  # requests in each resample (float32 counts: exact)
    out = []
    for q in quantiles:
        position = (drawn - 1.0) * q
        lower = np.floor(position)
        # the (lower)th and (lower + 1)th value of the resample, 0-based, by cumulative weight
        first, second = _order_statistics(
            sorted_codes, weights, per_unit, q, [lower, np.minimum(lower + 1, drawn - 1)], units
        )
        first_value, second_value = sorted_values[first], sorted_values[second]
        quantile = first_value + (position - lower) * (second_value - first_value)
        out.append(np.where(drawn > 0, quantile, np.nan))
    return out


def _order_statistics(
    sorted_codes: np.ndarray,
    weights: np.ndarray,
    per_unit: np.ndarray,
    q: float,
    ranks: list[np.ndarray],
    units: int,
) -> list[np.ndarray]:
    """The sorted position of each 0-based rank in each resample: the first whose cumulative weight
    passes it; searched in a window around the tier's own quantile, the whole range where it misses."""
    n = len(sorted_codes)
    centre = int(round(q * (n - 1)))
    below_centre = np.bincount(sorted_codes[: centre + 1], minlength=units)
    spread = below_centre - q * per_unit  # how a resample's rank at the centre moves with its weights
    sigma = float(np.sqrt(max(0.0, (spread**2).sum() - spread.sum() ** 2 / units)))
    half = int(WINDOW_SIGMAS * sigma) + 32
    start, stop = max(0, centre - half), min(n, centre + half + 1)
    found = _search(sorted_codes, weights, start, stop, ranks, units)
    missed = np.zeros(weights.shape[1], dtype=bool)
    for positions in found:
        missed |= positions < 0
    if missed.any():
        again = _search(sorted_codes, weights[:, missed], 0, n, [rank[missed] for rank in ranks], units)
        for positions, whole in zip(found, again, strict=True):
            positions[missed] = whole
    return [positions.clip(0, n - 1) for positions in found]


def _search(
    sorted_codes: np.ndarray, weights: np.ndarray, start: int, stop: int, ranks: list[np.ndarray], units: int
) -> list[np.ndarray]:
    """Per resample and rank, the first position in [start, stop) whose cumulative weight exceeds the
    rank (-1 where it is not in the window)."""
    resamples = weights.shape[1]
    before = np.bincount(sorted_codes[:start], minlength=units).astype(weights.dtype) @ weights
    if stop <= start:
        return [np.full(resamples, -1) for _ in ranks]
    # positions down, resamples across: the running sum adds whole rows (float32 counts stay exact)
    cumulative = weights[sorted_codes[start:stop]]
    np.add.accumulate(cumulative, axis=0, out=cumulative)  # in place: numpy's cumsum is slower here
    cumulative += before[None, :]
    out = []
    for rank in ranks:
        index = (cumulative <= rank[None, :]).sum(axis=0)
        inside = (before <= rank) & (cumulative[-1] > rank)
        out.append(np.where(inside, start + index, -1))
    return out


def interval(values: np.ndarray) -> tuple[float, float]:
    """The percentile interval of one figure's resamples (NaN, NaN when no resample has it)."""
    finite = values[~np.isnan(values)]
    if not len(finite):
        return np.nan, np.nan
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)


def interval_row(resamples: TierResamples | None) -> dict[str, float]:
    """INTERVAL_COLUMNS of one tier (NaN where the tier has no resamples or the figure no value)."""
    row = dict.fromkeys(INTERVAL_COLUMNS, np.nan)
    if resamples is None:
        return row
    for figure, values in resamples.figures.items():
        row[lo_column(figure)], row[hi_column(figure)] = interval(values)
    return row


@dataclass(frozen=True)
class Difference:
    """One figure of two runs at one tier: the change and its bootstrap interval."""

    figure: str
    baseline: float
    other: float
    change_lo: float  # 95 % interval of other - baseline
    change_hi: float

    @property
    def significant(self) -> bool:
        return self.change_lo > 0 or self.change_hi < 0


def difference(
    figure: str, baseline: TierResamples, other: TierResamples, values: tuple[float, float]
) -> Difference | None:
    """The bootstrap of other - baseline (independent resamples of each); None when either lacks it."""
    a, b = baseline.figures.get(figure), other.figures.get(figure)
    if a is None or b is None or any(np.isnan(v) for v in values):
        return None
    low, high = interval(b - a)
    if np.isnan(low):
        return None
    return Difference(figure, values[0], values[1], low, high)
