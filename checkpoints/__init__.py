"""Durable state in object storage: store, keys, ledger, manifest, lease, scratch, costs.

Knows nothing of prompts. See AGENTS.md for the invariants this package keeps.
"""

from checkpoints.keys import content_hash, idempotency_key, safe_key, sha256_hex
from checkpoints.store import ObjectStore, open_store

__all__ = ["ObjectStore", "content_hash", "idempotency_key", "open_store", "safe_key", "sha256_hex"]
