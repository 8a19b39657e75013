"""Prefect flows (thin wiring over the stage functions in tasks/) and the docmill CLI."""
