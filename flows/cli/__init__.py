"""The `docmill` command (entry point `flows.cli.main:main`; `python -m flows.cli` runs it too)."""
