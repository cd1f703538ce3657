"""`python -m gpusim ...` runs the gpusim command line."""

import sys

from gpusim.cli import main

sys.exit(main())
