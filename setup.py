"""The one thing pyproject.toml cannot say: the client's C fast path, built where a C compiler is.

`grill_locust/client/_fastread.c` reads a stamped socket and picks out a whole event in one call
(see its header); without a compiler (or off Linux) the install goes on and the client uses the
same logic in Python (`_arrival.read`, `one_whole_chunk`, `single_data_event`).
"""

import sys

from setuptools import Extension, setup

FAST_READ = Extension(
    "grill_locust.client._fastread",
    ["grill_locust/client/_fastread.c"],
    optional=True,  # a failed build is a warning, not a failed install
)

setup(ext_modules=[FAST_READ] if sys.platform == "linux" else [])
