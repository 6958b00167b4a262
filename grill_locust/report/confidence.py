"""95 % bootstrap intervals of the tier figures, over conversations, and the difference of two runs.

A tier's conversations are resampled with replacement (every request of a drawn conversation comes
with it: turns of one conversation are not independent) and each figure is computed again on the
resample; the interval is the 2.5th and 97.5th percentiles of RESAMPLES such figures. Percentiles are
exact on each resample (numpy's linear interpolation of the resampled requests, as the tier's own):
each is looked for in a window of the sorted values around the tier's own (the window's blocks summed
first, then the one block that holds it walked), the whole range where the window misses. A tier of more than MAX_UNITS conversations deals them at random into MAX_UNITS groups
and resamples the groups (groups of independent conversations are independent: the same spread, at a
bounded cost). The generator is seeded by the run, target and tier, so a report is reproducible and
two runs' resamples are independent. Fewer than two conversations: no interval.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from grill_locust.report.load_axis import load_text, load_units, tier_load
from grill_locust.report.percentiles import percentile_figures

CONFIDENCE = 0.95
RESAMPLES = 1000
MAX_UNITS = 2000  # resampled units per tier (conversations, or groups of them above this)
SEED = 21
# a resampled percentile is looked for this many standard deviations (and WINDOW_MARGIN positions) around
# the tier's own; the few resamples it misses (~0.3 %) are searched whole, which costs less than a wider window
WINDOW_SIGMAS = 3.0
WINDOW_MARGIN = 8
WEIGHT_CHUNK_DRAWS = 1 << 18  # draws counted at once
SEARCH_BLOCK = 16  # window positions summed together before the block holding a rank is walked

# summary column -> (record column, quantile): percentiles of successful requests
PERCENTILE_FIGURES: dict[str, tuple[str, float]] = {
    figure: (column, q / 100.0) for figure, (column, q) in percentile_figures().items()
}

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
    # goodput (report/goodput.py): requests meeting their per-request SLO, where a limit applies
    "slo_attainment": ("slo_met", "slo_judged", 1.0),
    "goodput_rps": ("slo_met", "span", 1.0),
    "goodput_tokens_per_s": ("slo_met_output_tokens", "span", 1.0),
}
FIGURES: tuple[str, ...] = (*PERCENTILE_FIGURES, *RATIO_FIGURES)
# what `grill compare` judges at each tier
HEADLINE_FIGURES: tuple[str, ...] = (
    "ttft_p50_s",
    "ttft_p90_s",
    "e2e_p50_s",
    "output_tokens_per_s",
    "success_rate",
)
# figures over the tier's span: the span is one measurement per tier, the same in every resample, so where
# their resamples do not vary (every conversation did the same work) two runs differ only by their spans,
# which no interval measures
SPAN_FIGURES: frozenset[str] = frozenset(f for f, (_, below, _) in RATIO_FIGURES.items() if below == "span")
# resamples this close together (relative to the figure, float32 sums' rounding) do not vary
NO_SPREAD = 1e-6
# each headline figure's difference is judged at this confidence (Bonferroni), so that a tier of two runs
# of one engine is called different, on any of the figures, at most 5 % of the time
COMPARE_CONFIDENCE = 1.0 - (1.0 - CONFIDENCE) / len(HEADLINE_FIGURES)
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
    "slo_met",
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
    sums = _unit_sums(frame, codes, units, ok, kept)
    columns = _sorted_columns(frame, codes, units, ok)
    # every weighted sum the tier needs, in one product: the ratio figures' sums, then each percentile
    # column's requests and its counts below each window
    per_unit = [*sums.values(), *(row for column in columns for row in column.per_unit_rows())]
    totals = np.vstack(per_unit).astype(weights.dtype) @ weights
    out: dict[str, np.ndarray] = {}
    total = dict(zip(sums, totals[: len(sums)].astype("float64"), strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        for figure, (numerator, denominator, scale) in RATIO_FIGURES.items():
            if numerator not in total:  # no value in any request (reasoning tokens never counted)
                continue
            below = np.full(resamples, span_s) if denominator == "span" else total[denominator]
            below = np.where(below > 0, below, np.nan)
            out[figure] = scale * total[numerator] / below
    row = len(sums)
    for column in columns:
        rows = len(column.per_unit_rows())
        found = column.resampled_quantiles(weights, totals[row : row + rows])
        row += rows
        for figures, quantile in zip(column.figures, found, strict=True):
            out.update(dict.fromkeys(figures, quantile))
    return TierResamples(conversations, out)


def _multinomial_weights(rng: np.random.Generator, resamples: int, units: int) -> np.ndarray:
    """How often each unit is drawn in each resample: units x resamples, each column summing to units
    (a unit's row is contiguous: the quantile search gathers rows)."""
    weights = np.empty((units, resamples), dtype="float32")  # counts: exact, and half the memory
    # drawn and counted a few resamples at a time: the counts stay in cache
    chunk = max(1, WEIGHT_CHUNK_DRAWS // units)
    for first in range(0, resamples, chunk):
        count = min(chunk, resamples - first)
        draws = rng.integers(0, units, size=(count, units), dtype=np.int64)
        draws *= count
        draws += np.arange(count)[:, None]  # unit u of resample first + b counts at u * count + b
        weights[:, first : first + count] = np.bincount(draws.ravel(), minlength=units * count).reshape(
            units, count
        )
    return weights


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
    slo_met = column("slo_met")  # 1, 0, or NaN where no limit applies (and for abandoned requests)
    judged = kept & ~np.isnan(slo_met)
    if judged.any():
        met = judged & (slo_met == 1.0)
        sums["slo_judged"] = total(judged)
        sums["slo_met"] = total(met)
        sums["slo_met_output_tokens"] = total(np.where(met, np.nan_to_num(column("output_tokens")), 0.0))
    return sums


def _sorted_columns(
    frame: pd.DataFrame, codes: np.ndarray, units: int, ok: np.ndarray
) -> list[_SortedColumn]:
    """Each percentile column's successful values in order, once per distinct column (TTFO is TTFT
    without reasoning), with the figures each quantile of it gives."""
    columns: list[_SortedColumn] = []
    for name in dict.fromkeys(column for column, _ in PERCENTILE_FIGURES.values()):
        values = frame[name].to_numpy(dtype="float64")
        present = ok & ~np.isnan(values)
        if not present.any():
            continue
        wanted = {f: q for f, (c, q) in PERCENTILE_FIGURES.items() if c == name}
        values = values[present]
        same = next((c for c in columns if np.array_equal(c.raw_values, values)), None)
        if same is not None:
            for figures, quantile in zip(same.figures, same.quantiles, strict=True):
                figures += [f for f, q in wanted.items() if q == quantile]
            continue
        columns.append(_SortedColumn.of(values, codes[present], units, wanted))
    return columns


@dataclass
class _SortedColumn:
    """One column's values in order, each with its unit, and the window of sorted positions each
    quantile is looked for in."""

    raw_values: np.ndarray
    values: np.ndarray  # sorted
    codes: np.ndarray  # the unit of each sorted value
    per_unit: np.ndarray  # values in each unit
    quantiles: list[float]
    figures: list[list[str]]  # the figures each quantile gives
    windows: list[tuple[int, int]]  # [start, stop) of sorted positions, per quantile
    below_windows: list[np.ndarray]  # per quantile: values of each unit below its window

    @classmethod
    def of(cls, values: np.ndarray, codes: np.ndarray, units: int, wanted: dict[str, float]) -> _SortedColumn:
        order = np.argsort(values)  # ties hold one value: any order of them gives the same percentiles
        sorted_codes = codes[order]
        per_unit = np.bincount(codes, minlength=units)
        quantiles = list(dict.fromkeys(wanted.values()))
        figures = [[f for f, q in wanted.items() if q == quantile] for quantile in quantiles]
        windows = [_window(sorted_codes, per_unit, q, units) for q in quantiles]
        below = [np.bincount(sorted_codes[:start], minlength=units) for start, _ in windows]
        return cls(values, values[order], sorted_codes, per_unit, quantiles, figures, windows, below)

    def per_unit_rows(self) -> list[np.ndarray]:
        """Per-unit counts whose weighted sums the search needs: the column's values, and those below
        each window."""
        return [self.per_unit, *self.below_windows]

    def resampled_quantiles(self, weights: np.ndarray, totals: np.ndarray) -> list[np.ndarray]:
        """Each quantile of each resample (numpy's linear interpolation), where resample b holds the
        values of unit u weights[u, b] times; totals: per_unit_rows() weighted by each resample."""
        drawn = totals[0].astype("float64")  # values in each resample (float32 counts: exact)
        n = len(self.values)
        out = []
        for q, (start, stop), before in zip(self.quantiles, self.windows, totals[1:], strict=True):
            position = (drawn - 1.0) * q
            lower = np.floor(position)
            # the (lower)th and (lower + 1)th value of the resample, 0-based, by cumulative weight (float32
            # like the weights: whole numbers, exact)
            ranks = [lower.astype("float32"), np.minimum(lower + 1, drawn - 1).astype("float32")]
            found = _search_window(self.codes, weights, start, stop, before, ranks)
            missed = np.flatnonzero((found < 0).any(axis=0))
            if len(missed):
                found[:, missed] = _search_whole(self.codes, weights, ranks, missed)
            first, second = self.values[found.clip(0, n - 1)]
            quantile = first + (position - lower) * (second - first)
            out.append(np.where(drawn > 0, quantile, np.nan))
        return out


def _window(sorted_codes: np.ndarray, per_unit: np.ndarray, q: float, units: int) -> tuple[int, int]:
    """The sorted positions quantile q of a resample lies in but for ~0.3 % of resamples: WINDOW_SIGMAS
    standard deviations of its rank around the column's own quantile."""
    n = len(sorted_codes)
    centre = int(round(q * (n - 1)))
    below_centre = np.bincount(sorted_codes[: centre + 1], minlength=units)
    spread = below_centre - q * per_unit  # how a resample's rank at the centre moves with its weights
    sigma = float(np.sqrt(max(0.0, (spread**2).sum() - spread.sum() ** 2 / units)))
    half = int(WINDOW_SIGMAS * sigma) + WINDOW_MARGIN
    return max(0, centre - half), min(n, centre + half + 1)


def _search_window(
    sorted_codes: np.ndarray,
    weights: np.ndarray,
    start: int,
    stop: int,
    before: np.ndarray,
    ranks: list[np.ndarray],
) -> np.ndarray:
    """Per rank and resample, the first position in [start, stop) whose cumulative weight exceeds the
    rank (-1 where it is not in the window); before: each resample's weight below start."""
    found = np.full((len(ranks), weights.shape[1]), -1)
    if stop <= start:
        return found
    # positions down, resamples across; the window's blocks are summed first and only the block that
    # holds a rank is walked position by position (float32 counts stay exact)
    rows = weights[sorted_codes[start:stop]]
    ends = np.add.reduceat(rows, np.arange(0, len(rows), SEARCH_BLOCK), axis=0)
    np.cumsum(ends, axis=0, out=ends)
    ends += before  # the cumulative weight at each block's last position
    blocks = [np.count_nonzero(ends <= rank, axis=0) for rank in ranks]
    resamples = np.arange(weights.shape[1])
    found[:] = _walk_block(rows, ends, before, blocks[0], resamples, ranks)
    for i in range(1, len(ranks)):  # a later rank is mostly in the first one's block
        apart = np.flatnonzero(blocks[i] != blocks[0])
        found[i, apart] = _walk_block(rows, ends, before, blocks[i][apart], apart, [ranks[i][apart]])[0]
    for row, rank, block in zip(found, ranks, blocks, strict=True):
        row += start
        row[(before > rank) | (block == len(ends))] = -1
    return found


def _walk_block(
    rows: np.ndarray,
    ends: np.ndarray,
    before: np.ndarray,
    blocks: np.ndarray,
    resamples: np.ndarray,
    ranks: list[np.ndarray],
) -> list[np.ndarray]:
    """For the given resamples, the window position of each rank inside that resample's block (ranks
    whose cumulative weight is not reached inside it come out at a block edge: the caller sorts out)."""
    blocks = np.minimum(blocks, len(ends) - 1)
    positions = blocks * SEARCH_BLOCK + np.arange(SEARCH_BLOCK)[:, None]  # block's positions x resamples
    outside = positions >= len(rows)
    within = rows.ravel().take(np.minimum(positions, len(rows) - 1) * rows.shape[1] + resamples)
    within[outside] = 0
    within[0] += np.where(blocks > 0, ends[blocks - 1, resamples], before[resamples])
    np.cumsum(within, axis=0, out=within)
    return [blocks * SEARCH_BLOCK + np.count_nonzero(within <= rank, axis=0) for rank in ranks]


def _search_whole(
    sorted_codes: np.ndarray, weights: np.ndarray, ranks: list[np.ndarray], resamples: np.ndarray
) -> np.ndarray:
    """Per rank and each of the given resamples, the first of all positions whose cumulative weight
    exceeds the rank."""
    cumulative = np.cumsum(weights[:, resamples].T[:, sorted_codes], axis=1)  # resamples x positions
    found = np.empty((len(ranks), len(resamples)), dtype=np.int64)
    for i, (row, resample) in enumerate(zip(cumulative, resamples, strict=True)):
        found[:, i] = np.searchsorted(row, [rank[resample] for rank in ranks], side="right")
    return found


def interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of one figure's resamples (NaN, NaN when no resample has it)."""
    finite = values[~np.isnan(values)]
    if not len(finite):
        return np.nan, np.nan
    tail = (1.0 - confidence) / 2.0 * 100.0
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


HEADLINE_NAMES: dict[str, str] = {
    "ttft_p50_s": "TTFT p50",
    "ttft_p90_s": "TTFT p90",
    "e2e_p50_s": "E2E p50",
    "output_tokens_per_s": "system tok/s",
    "success_rate": "success rate",
}
# figures whose change is told in percentage points of a share rather than in percent of the first run's
SHARE_FIGURES: frozenset[str] = frozenset({"success_rate"})
COMPARISON_COLUMNS: list[str] = [
    "baseline",  # the first run's label
    "run",  # the run compared with it
    "target",  # the run's target (`<baseline's> vs <run's>` when their names differ)
    "tier",  # `<users> users`, or a rate tier's `<rate> req/s` or `<rate> sessions/s`
    "figure",
    "baseline_value",
    "value",
    "change_pct",  # (value - baseline) / baseline
    "change_lo_pct",  # COMPARE_CONFIDENCE bootstrap interval of the change
    "change_hi_pct",
    "change_lo",  # the same interval in the figure's own unit
    "change_hi",
    "judged",  # False where the bootstrap saw no spread to judge the difference by (SPAN_FIGURES)
    "significant",
]


@dataclass(frozen=True)
class RunFigures:
    """What one run brings to a comparison: its label, its tier rows and their resamples."""

    label: str
    summary: pd.DataFrame
    resamples: Mapping[tuple[str, int], TierResamples]


def compare_runs(baseline: RunFigures, other: RunFigures) -> pd.DataFrame:
    """COMPARISON_COLUMNS for each tier both runs ran (same users, or same rate) of each pair of targets
    and each HEADLINE_FIGURES: the difference other - baseline, bootstrapped from both runs' independent
    resamples; significant when its COMPARE_CONFIDENCE interval leaves out 0 (an end at 0 does not) and
    it is judged. A figure whose resamples have no spread in either run is a constant of both samples:
    a difference of two such percentiles or shares is there in the data (100 % of 20 conversations vs
    0 % is a difference), but a SPAN_FIGURES one is the spans' alone: not judged."""
    rows = []
    for base_target, other_target in _target_pairs(baseline.summary, other.summary):
        base_tiers = _tiers_of(baseline.summary, base_target)
        other_tiers = _tiers_of(other.summary, other_target)
        name = base_target if base_target == other_target else f"{base_target} vs {other_target}"
        for tier, base_row in base_tiers.items():
            other_row = other_tiers.get(tier)
            if other_row is None:
                continue
            base_resamples = baseline.resamples.get((base_target, int(base_row["tier_index"])))
            other_resamples = other.resamples.get((other_target, int(other_row["tier_index"])))
            for figure in HEADLINE_FIGURES:
                base_value, value = float(base_row.get(figure, np.nan)), float(other_row.get(figure, np.nan))
                if np.isnan(base_value) or np.isnan(value):
                    continue
                low = high = np.nan
                judged = True
                if base_resamples is not None and other_resamples is not None:
                    low, high = _change_interval(figure, base_resamples, other_resamples)
                    judged = figure not in SPAN_FIGURES or not (
                        _no_spread(base_resamples.figures.get(figure))
                        and _no_spread(other_resamples.figures.get(figure))
                    )
                scale = 100.0 / base_value if base_value else np.nan
                rows.append(
                    {
                        "baseline": baseline.label,
                        "run": other.label,
                        "target": name,
                        "tier": tier,
                        "figure": figure,
                        "baseline_value": base_value,
                        "value": value,
                        "change_pct": (value - base_value) * scale,
                        "change_lo_pct": low * scale,
                        "change_hi_pct": high * scale,
                        "change_lo": low,
                        "change_hi": high,
                        "judged": judged,
                        "significant": judged and bool(low > 0 or high < 0),
                    }
                )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def nothing_in_common(baseline: RunFigures, other: RunFigures) -> str | None:
    """The line that says a run shares no tier with the first (so nothing of it is compared), or None."""
    pairs = _target_pairs(baseline.summary, other.summary)
    if any(set(_tiers_of(baseline.summary, a)) & set(_tiers_of(other.summary, b)) for a, b in pairs):
        return None

    def ran(run: RunFigures) -> str:
        tiers = [
            t
            for target in dict.fromkeys(_whole_tiers(run.summary)["target"].astype(str))
            for t in _tiers_of(run.summary, target)
        ]
        return ", ".join(dict.fromkeys(tiers)) or "no tier"

    return (
        f"{other.label}: no tier in common with {baseline.label} ({baseline.label} ran {ran(baseline)}; "
        f"{other.label} ran {ran(other)}): nothing compared"
    )


def _change_interval(figure: str, baseline: TierResamples, other: TierResamples) -> tuple[float, float]:
    """The percentile interval of other - baseline over paired draws of the two independent bootstraps."""
    a, b = baseline.figures.get(figure), other.figures.get(figure)
    if a is None or b is None:
        return np.nan, np.nan
    return interval(b - a, COMPARE_CONFIDENCE)


def _no_spread(values: np.ndarray | None) -> bool:
    """The resamples of a figure are all one value (or there are none)."""
    if values is None:
        return True
    finite = values[np.isfinite(values)]
    if not len(finite):
        return True
    low, high = float(finite.min()), float(finite.max())
    return high - low <= NO_SPREAD * max(abs(low), abs(high))


def _whole_tiers(summary: pd.DataFrame) -> pd.DataFrame:
    """A run's tier rows but a mix's persona rows (the whole tier is what two runs compare)."""
    if "mix" not in summary:
        return summary
    mix = summary["mix"].astype(str)
    return summary[(mix == "") | (mix == summary["conversation"].astype(str))]


def _target_pairs(baseline: pd.DataFrame, other: pd.DataFrame) -> list[tuple[str, str]]:
    """Targets of the same name; when the runs share none, their targets in order (one engine per run)."""
    base_targets = list(dict.fromkeys(_whole_tiers(baseline)["target"].astype(str)))
    other_targets = list(dict.fromkeys(_whole_tiers(other)["target"].astype(str)))
    shared = [target for target in base_targets if target in other_targets]
    if shared:
        return [(target, target) for target in shared]
    return list(zip(base_targets, other_targets, strict=False))


def _tiers_of(summary: pd.DataFrame, target: str) -> dict[str, pd.Series]:
    """A target's tier rows by their load: `<users> users`, or a rate tier's `<rate> req/s`."""
    rows = _whole_tiers(summary)
    rows = rows[rows["target"].astype(str) == target]
    tiers: dict[str, pd.Series] = {}
    for (_, row), load, unit in zip(rows.iterrows(), tier_load(rows), load_units(rows), strict=True):
        tiers.setdefault(load_text(load, unit), row)
    return tiers


def verdicts(comparisons: pd.DataFrame) -> pd.DataFrame:
    """One line per run x target x tier: the headline figures that differ beyond their intervals, each
    with its change and interval, or NO_SIGNIFICANT_DIFFERENCE; then those not judged."""
    columns = ["baseline", "run", "target", "tier", "verdict"]
    if not len(comparisons):
        return pd.DataFrame(columns=columns)
    rows = []
    for (baseline, run, target, tier), group in comparisons.groupby(
        ["baseline", "run", "target", "tier"], sort=False
    ):
        differing = [_difference_text(row) for row in group.itertuples() if row.significant]
        verdict = "; ".join(differing) if differing else NO_SIGNIFICANT_DIFFERENCE
        unjudged = [HEADLINE_NAMES[row.figure] for row in group.itertuples() if not row.judged]
        if unjudged:
            verdict += f"; {', '.join(unjudged)} not judged (every resample the same: only the spans differ)"
        rows.append({"baseline": baseline, "run": run, "target": target, "tier": tier, "verdict": verdict})
    return pd.DataFrame(rows, columns=columns)


def _difference_text(row: Any) -> str:
    """`TTFT p50 +31 % [+22, +40]`; a share in points: `success rate 100 % -> 0 % (-100 pts [-100, -100])`."""
    name = HEADLINE_NAMES[row.figure]
    if row.figure in SHARE_FIGURES:
        return (
            f"{name} {100 * row.baseline_value:.0f} % -> {100 * row.value:.0f} % "
            f"({100 * (row.value - row.baseline_value):+.0f} pts [{100 * row.change_lo:+.0f}, {100 * row.change_hi:+.0f}])"
        )
    return f"{name} {row.change_pct:+.0f} % [{row.change_lo_pct:+.0f}, {row.change_hi_pct:+.0f}]"
