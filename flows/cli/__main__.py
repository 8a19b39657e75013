"""`python -m flows.cli ...` is `docmill ...`."""

import sys

from flows.cli.main import main

sys.exit(main())
