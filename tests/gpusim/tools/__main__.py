"""`python -m gpusim.tools NAME ARGS...`"""

import sys

from . import main

sys.exit(main())
