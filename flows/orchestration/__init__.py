"""The Prefect layer: flows, chunk tasks, artifacts and the temporary API server (see flows/__init__.py)."""
