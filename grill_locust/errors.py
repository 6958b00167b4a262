"""The one exception type users see: a one-line message naming the place, exit status 2."""


class GrillError(Exception):
    """An error in the user's input (scenario, flags) or environment, reported as one line."""

    exit_code = 2
