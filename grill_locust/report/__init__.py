"""Reports: aggregate a run's records per target x tier, capacity at an SLO, figures and report.html."""

from grill_locust.report.aggregate import summarize, summarize_run, summarize_turns
from grill_locust.report.capacity import capacity_at_slo, recommendations
from grill_locust.report.load import RunData, load_run
from grill_locust.report.tables import format_table

__all__ = [
    "RunData",
    "capacity_at_slo",
    "format_table",
    "load_run",
    "recommendations",
    "summarize",
    "summarize_run",
    "summarize_turns",
]
