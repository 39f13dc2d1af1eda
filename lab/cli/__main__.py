"""`python -m lab.cli`, the same as `labctl`."""

import sys

from lab.cli import main

sys.exit(main())
