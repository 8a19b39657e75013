"""docmill: documents in, validated source-linked structured data out, with Claude.

This package holds what every room shares: settings (`docmill.settings`), the
exception tree (`docmill.errors`), and helper processes that die with docmill
(`docmill.processes`, child side `docmill.lifeline`), and a tick repeated while a block runs
(`docmill.background`: lease and claim renewals). Stage logic lives in `tasks/`, durable state in
`checkpoints/`, Prefect wiring and the CLI in `flows/`, the offline API in `emulator/`.
"""

__version__ = "0.1.0"
