"""Deployments registered before the flows/ layout of 2026-12 name `flows/extract.py:nightly`,
`:backfill`, `:resume`; they keep working through these names. `prefect deploy --all --prefect-file
deploy/prefect.yaml` registers them at flows/orchestration/prefect_flows.py (the flows are the same objects)."""

from flows.orchestration.prefect_flows import backfill, extract, nightly, resume

__all__ = ["backfill", "extract", "nightly", "resume"]
