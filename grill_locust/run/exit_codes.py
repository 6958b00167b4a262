"""The exit codes a campaign ends with besides Locust's own (0: all fine, 1: requests failed), in one
place: the run sets them, tests and scripts read them without importing Locust. When several apply, the
last one set wins; TIER_INCOMPLETE only where no other is set."""

RECORDS_NOT_WRITTEN = 1  # the results folder lacks records the run received (a full disk)
REFUSED = 2  # a worker could not run the scenario (a secret its environment lacks), as bad input is
ENGINE_GONE = 3  # the backend did not come back within engine_wait_s after an outage
# the engine refused a tier's requests as sent (llama-server without --jinja, /infill on a model without
# FIM tokens): the target's other tiers were skipped; the last line says what to change
ENGINE_REFUSED = 4
# a tier ended before its planned iterations or sends (its time cap, or an outage not run again), and
# no later attempt completed it: its figures are no measure of its load
TIER_INCOMPLETE = 5
