"""docmill's exit codes; what each means is the table in flows/cli/main.py (`docmill --help`) and
README.md."""

from __future__ import annotations

EXIT_OK, EXIT_INPUT, EXIT_RUN, EXIT_BUDGET, EXIT_LEASE, EXIT_INTERRUPT = 0, 2, 3, 4, 5, 130
EXIT_INTEGRATION = 6
