"""A run spread over Prefect workers (`docmill run --workers N`): the driver's side and the worker flow (see flows/__init__.py)."""
