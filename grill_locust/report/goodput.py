"""Goodput: each record judged by its conversation's per-request SLO (`Slo.judge`, the function the run
used to write the record's slo_met) and, per tier, the share of requests that met it and their rates.

The report judges every record again by the SLO it reports (the run's own, or the one `grill report`'s
flags make), so that a folder written before records carried slo_met, or judged with other limits,
reads the same way; with the run's own SLO the answer is the records' slo_met.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from grill_locust.config import Slo

GOODPUT_COLUMNS: list[str] = ["slo_attainment", "goodput_rps", "goodput_tokens_per_s"]


def judged_slo_met(records: pd.DataFrame, slo: Slo, conversation_slos: Mapping[str, Slo]) -> pd.Series:
    """slo_met of each record (nullable boolean) by its conversation's SLO: `conversation_slos`, else `slo`."""
    met = pd.Series(pd.NA, index=records.index, dtype="boolean")
    if not len(records):
        return met
    conversations = records["conversation"].astype(str)
    for conversation, rows in records.groupby(conversations, sort=False):
        judge = conversation_slos.get(str(conversation), slo)
        if not judge.request_limits():
            continue
        columns = [rows[name].to_numpy(dtype=object) for name in ("status", "ttft_s", "tpot_s", "e2e_s")]
        met.loc[rows.index] = [
            pd.NA if verdict is None else verdict
            for verdict in (judge.judge(*values) for values in zip(*columns, strict=True))
        ]
    return met


def tier_goodput_counts(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per tier: requests judged (a limit applies; abandoned and our own stop's cuts left out), those that
    met the SLO and their output tokens. `frame` has the float column slo_met (1, 0, NaN) and the
    boolean `cancelled`."""
    judged = frame[frame["slo_met"].notna() & ~frame["cancelled"]]
    met = judged["slo_met"] == 1.0
    tiers = [judged[key] for key in keys]
    counts = pd.DataFrame(
        {
            "slo_judged": judged.groupby(keys).size(),
            "slo_met_requests": met.groupby(tiers).sum(),
            "slo_met_output_tokens": judged["output_tokens"].where(met, 0.0).fillna(0.0).groupby(tiers).sum(),
        }
    )
    if not len(counts):
        counts.index = pd.MultiIndex.from_tuples([], names=keys)
    return counts.astype(np.float64)


def goodput_columns(counts: pd.DataFrame, span_s: pd.Series) -> pd.DataFrame:
    """GOODPUT_COLUMNS from tier_goodput_counts and each tier's span: empty where no limit applies."""
    judged = counts["slo_judged"].where(counts["slo_judged"] > 0)
    span = span_s.where(span_s > 0)
    met = counts["slo_met_requests"].where(judged.notna())
    return pd.DataFrame(
        {
            "slo_attainment": met / judged,
            "goodput_rps": met / span,
            "goodput_tokens_per_s": counts["slo_met_output_tokens"].where(judged.notna()) / span,
        },
        index=counts.index,
    ).astype(np.float64)
