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
HEADLINE_FIGURES: tuple[str, ...] = ("ttft_p50_s", "ttft_p90_s", "e2e_p50_s", "output_tokens_per_s")
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
    out: dict[str, np.ndarray] = {}
    sums = _unit_sums(frame, codes, units, ok, kept)
    totals = np.vstack(list(sums.values())).astype(weights.dtype) @ weights
    total = dict(zip(sums, totals.astype("float64"), strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        for figure, (numerator, denominator, scale) in RATIO_FIGURES.items():
            if numerator not in total:  # no value in any request (reasoning tokens never counted)
                continue
            below = np.full(resamples, span_s) if denominator == "span" else total[denominator]
            below = np.where(below > 0, below, np.nan)
            out[figure] = scale * total[numerator] / below
    done: list[tuple[np.ndarray, list[np.ndarray]]] = []  # TTFO is TTFT without reasoning: once is enough
    for column in dict.fromkeys(column for column, _ in PERCENTILE_FIGURES.values()):
        values = frame[column].to_numpy(dtype="float64")
        present = ok & ~np.isnan(values)
        if not present.any():
            continue
        wanted = {f: q for f, (c, q) in PERCENTILE_FIGURES.items() if c == column}
        values = values[present]
        found = next((same for seen, same in done if np.array_equal(seen, values)), None)
        if found is None:
            found = _resampled_quantiles(values, codes[present], units, weights, list(wanted.values()))
            done.append((values, found))
        out.update(zip(wanted, found, strict=True))
    return TierResamples(conversations, out)


def _multinomial_weights(rng: np.random.Generator, resamples: int, units: int) -> np.ndarray:
    """How often each unit is drawn in each resample: units x resamples, each column summing to units
    (a unit's row is contiguous: the quantile search gathers rows)."""
    # int32 throughout: units x resamples stays far below 2**31 (MAX_UNITS x RESAMPLES)
    draws = rng.integers(0, units, size=(resamples, units), dtype=np.int32)
    draws *= resamples
    draws += np.arange(resamples, dtype=np.int32)[:, None]
    counts = np.bincount(draws.ravel(), minlength=units * resamples)
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
    slo_met = column("slo_met")  # 1, 0, or NaN where no limit applies (and for abandoned requests)
    judged = kept & ~np.isnan(slo_met)
    if judged.any():
        met = judged & (slo_met == 1.0)
        sums["slo_judged"] = total(judged)
        sums["slo_met"] = total(met)
        sums["slo_met_output_tokens"] = total(np.where(met, np.nan_to_num(column("output_tokens")), 0.0))
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
    half = int(WINDOW_SIGMAS * sigma) + WINDOW_MARGIN
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
    before = (
        np.bincount(sorted_codes[:start], minlength=units).astype(weights.dtype) @ weights
        if start
        else np.zeros(resamples, dtype=weights.dtype)
    )
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
}
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
    resamples; significant when its COMPARE_CONFIDENCE interval leaves out 0."""
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
                if base_resamples is not None and other_resamples is not None:
                    low, high = _change_interval(figure, base_resamples, other_resamples)
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
                        "significant": bool(low > 0 or high < 0),
                    }
                )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _change_interval(figure: str, baseline: TierResamples, other: TierResamples) -> tuple[float, float]:
    """The percentile interval of other - baseline over paired draws of the two independent bootstraps."""
    a, b = baseline.figures.get(figure), other.figures.get(figure)
    if a is None or b is None:
        return np.nan, np.nan
    return interval(b - a, COMPARE_CONFIDENCE)


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
    with its change and interval, or NO_SIGNIFICANT_DIFFERENCE."""
    columns = ["baseline", "run", "target", "tier", "verdict"]
    if not len(comparisons):
        return pd.DataFrame(columns=columns)
    rows = []
    for (baseline, run, target, tier), group in comparisons.groupby(
        ["baseline", "run", "target", "tier"], sort=False
    ):
        differing = [
            f"{HEADLINE_NAMES[row.figure]} {row.change_pct:+.0f} % [{row.change_lo_pct:+.0f}, {row.change_hi_pct:+.0f}]"
            for row in group.itertuples()
            if row.significant
        ]
        verdict = "; ".join(differing) if differing else NO_SIGNIFICANT_DIFFERENCE
        rows.append({"baseline": baseline, "run": run, "target": target, "tier": tier, "verdict": verdict})
    return pd.DataFrame(rows, columns=columns)
