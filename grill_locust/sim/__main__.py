"""`python -m grill_locust.sim`: the same as `grill sim`."""

import sys

from grill_locust.sim.cli import main

sys.exit(main())
