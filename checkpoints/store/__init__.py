"""The object store: one interface (`ObjectStore`, in base.py), two backends (a local folder in
local.py, S3 in s3.py), and `open_store(uri)`, the one way in. See checkpoints/AGENTS.md."""

from __future__ import annotations

import os

from checkpoints.retry import RetryPolicy
from checkpoints.store.base import ObjectStore, dumps_json, gunzip_json, gzip_json, loads_json
from checkpoints.store.local import LocalStore
from docmill.errors import ConfigError

__all__ = ["LocalStore", "ObjectStore", "dumps_json", "gunzip_json", "gzip_json", "loads_json", "open_store"]


def open_store(
    uri: str | os.PathLike[str], *, endpoint_url: str | None = None, retry: RetryPolicy | None = None
) -> ObjectStore:
    """A store for a folder path, `file://...` or `s3://bucket/prefix`.

    S3: the endpoint comes from `endpoint_url`, else DOCMILL_S3_ENDPOINT_URL, AWS_ENDPOINT_URL_S3 or
    AWS_ENDPOINT_URL; credentials from the usual AWS chain. `retry` tunes the transient-fault policy.
    """
    text = os.fspath(uri)
    if not text:
        raise ConfigError("empty store URI", hint="set DOCMILL_STORE to a folder or s3://bucket/prefix")
    if text.startswith("s3://"):
        from checkpoints.store.s3 import S3Store  # boto3 is imported only for S3 stores

        return S3Store(text, endpoint_url=endpoint_url, retry=retry)
    if "://" in text and not text.startswith("file://"):
        scheme = text.split("://", 1)[0]
        raise ConfigError(
            f"unsupported store scheme {scheme!r}",
            hint="use a folder path, file://path or s3://bucket/prefix",
        )
    return LocalStore(text.removeprefix("file://"))
