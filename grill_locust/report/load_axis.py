"""A tier's load as the report shows it: its users for a closed-loop tier, its rate for an open-loop one
(every rate tier has 0 users). Figures, tables and capacity read the load and its unit from here.

A unit is "users", or the rate's unit (the kinds' `rate_unit`: "req/s", or "sessions/s" for kinds
whose one send is a session). Tiers of different units never share an axis or a capacity row.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from grill_locust.config import KIND_MIX
from grill_locust.workload.kinds import rate_unit

USERS = "users"


def _rates(rows: pd.DataFrame) -> pd.Series:
    """Each row's tier_rate, NaN for a tier of users (and in tables of older folders, which have none)."""
    if "tier_rate" not in rows:
        return pd.Series(np.nan, index=rows.index, dtype="float64")
    return pd.to_numeric(rows["tier_rate"], errors="coerce").astype("float64")


def tier_load(rows: pd.DataFrame) -> pd.Series:
    """Each row's load: its tier's rate where it has one, else its users."""
    return _rates(rows).fillna(rows["tier_users"].astype("float64"))


def load_units(rows: pd.DataFrame) -> pd.Series:
    """Each row's load unit. A mix persona's row counts its mix's sessions, as the mix's rate does."""
    units = pd.Series(USERS, index=rows.index, dtype=object)
    rated = _rates(rows).notna()
    if rated.any():
        kinds = rows["kind"].astype(str)
        if "mix" in rows:
            kinds = kinds.where(rows["mix"].astype(str) == "", KIND_MIX)
        units[rated] = [rate_unit(kind) for kind in kinds[rated]]
    return units


def with_load(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with their load and unit in `_load` and `_unit` (concatenated: a summary with its intervals
    has many columns, and inserting into it is slow)."""
    extra = pd.DataFrame({"_load": tier_load(rows), "_unit": load_units(rows)}, index=rows.index)
    return pd.concat([rows, extra], axis=1)


def axis_label(unit: str) -> str:
    """What a figure's load axis says."""
    return "concurrent users" if unit == USERS else f"rate ({unit})"


def load_text(value: float, unit: str) -> str:
    """`8 users`, `1 user`, `2.5 req/s`."""
    if unit == USERS:
        return f"{value:g} user" + ("" if value == 1 else "s")
    return f"{value:g} {unit}"


def floor_text(value: float, unit: str) -> str:
    """An estimated load rounded down: whole users, a rate to its first decimal."""
    return f"{math.floor(value)}" if unit == USERS else f"{math.floor(value * 10) / 10:g}"
