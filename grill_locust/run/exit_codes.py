"""The exit codes a campaign ends with besides Locust's own (0: all fine, 1: requests failed), in one
place: the run sets them, tests and scripts read them without importing Locust."""

RECORDS_NOT_WRITTEN = 1  # the results folder lacks records the run received (a full disk)
REFUSED = 2  # a worker could not run the scenario (a secret its environment lacks), as bad input is
ENGINE_GONE = 3  # the backend did not come back within engine_wait_s after an outage
