"""Durable state in object storage: store, keys, ledger, manifest, lease, scratch, costs.

Knows nothing of prompts. See AGENTS.md for the invariants this package keeps.
"""
