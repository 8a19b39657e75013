"""One run, with or without Prefect: which run, its phases, its passes (see flows/__init__.py)."""
