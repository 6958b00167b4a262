"""What is sent: the code corpus, token counting and the workload generators (see generators.py)."""

from grill_locust.workload.calibrate import TokenCounter, backend_token_counter
from grill_locust.workload.generators import ConversationPlan, Workload, build_workload

__all__ = ["ConversationPlan", "TokenCounter", "Workload", "backend_token_counter", "build_workload"]
