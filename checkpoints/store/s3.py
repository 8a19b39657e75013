"""S3 backend through boto3 (AWS, SeaweedFS, MinIO...).

Conditional writes use S3's own preconditions: `IfNoneMatch="*"` (put-if-absent) and
`IfMatch=etag` (compare-and-swap); both answer 412 when they lose. botocore's retries are off;
`checkpoints.retry` is the one retry layer. Error messages name the bucket, key and S3 error code,
never credentials.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

import boto3
import botocore.exceptions as bexc
from botocore.config import Config

from checkpoints.keys import check_key, check_prefix
from checkpoints.retry import RetryPolicy, call_with_retry, code_status, describe, is_transient
from checkpoints.store.base import ListedStamp, ObjectStore, etag_of
from docmill.errors import ConfigError, NotFound, PreconditionFailed, StoreError

T = TypeVar("T")
ENDPOINT_ENV = ("DOCMILL_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_MISSING = {"NoSuchKey", "NotFound", "404"}


# Sessions are shared (a fresh one re-parses the S3 model: ~0.2-0.4 s per store); keyed by the AWS_
# environment (credentials, profile, region...), since a session caches the credentials it resolved.
_SESSIONS: dict[str, boto3.session.Session] = {}
_SESSIONS_LOCK = threading.Lock()  # creating clients from one session is not thread-safe


def _new_client(endpoint_url: str | None, config: Config) -> Any:
    """A new client (own event hooks, own connection pool) from a shared session."""
    aws = sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))
    fingerprint = hashlib.sha256(repr(aws).encode()).hexdigest()
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(fingerprint)
        if session is None:
            session = _SESSIONS[fingerprint] = boto3.session.Session()
        return session.client(
            "s3", endpoint_url=endpoint_url, region_name=session.region_name or "us-east-1", config=config
        )


class S3Store(ObjectStore):
    def __init__(
        self, uri: str, *, endpoint_url: str | None = None, retry: RetryPolicy | None = None
    ) -> None:
        parts = urlsplit(uri)
        if parts.scheme != "s3" or not parts.netloc:
            raise ConfigError(f"not an S3 URI: {uri!r}", hint="use s3://bucket/prefix")
        self.bucket = parts.netloc
        prefix = parts.path.strip("/")
        if prefix:
            check_prefix(prefix)
        self.prefix = f"{prefix}/" if prefix else ""
        self.uri = f"s3://{self.bucket}/{prefix}".rstrip("/")
        self.endpoint_url = endpoint_url or next(
            (os.environ[n] for n in ENDPOINT_ENV if os.environ.get(n)), None
        )
        self.retry = retry or RetryPolicy.from_env()
        self.page_size = 1000  # keys per ListObjectsV2 page (S3's maximum)
        self.client: Any = _new_client(
            self.endpoint_url,
            Config(
                retries={"total_max_attempts": 1, "mode": "standard"},  # tenacity: the one retry layer
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=64,
                s3={"addressing_style": "path"} if self.endpoint_url else None,
            ),
        )

    def link(self, key: str, *, expires_seconds: int = 7 * 24 * 3600) -> str:
        """A presigned GET URL (SigV4 allows at most 7 days); the s3:// URI when no credentials sign."""
        try:
            url: str = self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self._k(key)},
                ExpiresIn=min(int(expires_seconds), 7 * 24 * 3600),
            )
        except Exception:  # no credentials (or none that sign): the path still names it
            return super().link(key)
        return url

    def _k(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return call_with_retry(self.retry, fn, what=f"S3 {what}")
        except (bexc.NoCredentialsError, bexc.PartialCredentialsError) as e:
            raise StoreError(
                f"S3 {what}: no usable AWS credentials for {self.uri}",
                hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance role)",
            ) from e

    def _fail(self, what: str, key: str, e: bexc.ClientError) -> StoreError:
        code, status = code_status(e)
        hint = {
            403: "check the AWS credentials and the bucket policy (s3:GetObject/PutObject/ListBucket)",
            404: f"create the bucket {self.bucket!r} or fix the store URI",
            501: "this S3 server lacks conditional writes (If-Match / If-None-Match); use a newer server",
        }.get(status, "see the S3 error code")
        return StoreError(
            f"S3 {what} s3://{self.bucket}/{self.prefix}{key} failed: {describe(e)}",
            hint=hint,
            key=key,
            code=code,
            status=status,
        )

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        k = self._k(key)

        def go() -> tuple[bytes, str]:
            resp = self.client.get_object(Bucket=self.bucket, Key=k)
            return resp["Body"].read(), str(resp["ETag"])

        try:
            return self._call(f"get {key}", go)
        except bexc.ClientError as e:
            if code_status(e)[0] in _MISSING:
                raise NotFound(f"no object {key!r} in {self.uri}", key=key) from e
            raise self._fail("get", key, e) from e

    def put(self, key: str, data: bytes) -> str:
        k = self._k(key)
        try:
            resp = self._call(
                f"put {key}", lambda: self.client.put_object(Bucket=self.bucket, Key=k, Body=data)
            )
        except bexc.ClientError as e:
            raise self._fail("put", key, e) from e
        return str(resp["ETag"])

    def put_if_absent(self, key: str, data: bytes) -> bool:
        k = self._k(key)
        try:
            self._call(
                f"put-if-absent {key}",
                lambda: self.client.put_object(Bucket=self.bucket, Key=k, Body=data, IfNoneMatch="*"),
            )
        except bexc.ClientError as e:
            code, status = code_status(e)
            if status == 412 or code == "PreconditionFailed":
                return False
            raise self._fail("put-if-absent", key, e) from e
        return True

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        k = self._k(key)
        faults = 0

        def go() -> Any:
            nonlocal faults
            try:
                return self.client.put_object(Bucket=self.bucket, Key=k, Body=data, IfMatch=etag)
            except Exception as e:
                if is_transient(e):
                    faults += 1
                raise

        try:
            resp = self._call(f"put-if-match {key}", go)
        except bexc.ClientError as e:
            code, status = code_status(e)
            if status in (412, 404) or code in ("PreconditionFailed", *_MISSING):
                if faults and self._is_ours(k, data):
                    return etag_of(data)  # an earlier attempt landed but its answer was lost
                raise PreconditionFailed(
                    f"{key!r} changed since it was read", key=key, hint="read it again and retry"
                ) from e
            raise self._fail("put-if-match", key, e) from e
        return str(resp["ETag"])

    def copy(self, src: str, dst: str, *, etag: str) -> bool:
        """A server-side copy, on condition that `src` still has `etag` (the bytes stay in S3)."""
        s, d = self._k(src), self._k(dst)
        if s == d:  # S3 refuses a copy onto itself: the object already holds those bytes if its ETag does
            return self._etag(src) == etag
        source = {"Bucket": self.bucket, "Key": s}
        try:
            self._call(
                f"copy {src}",
                lambda: self.client.copy_object(
                    Bucket=self.bucket, Key=d, CopySource=source, CopySourceIfMatch=etag
                ),
            )
        except bexc.ClientError as e:
            code, status = code_status(e)
            if status in (412, 404) or code in ("PreconditionFailed", *_MISSING):
                return False
            raise self._fail("copy", dst, e) from e
        return True

    def _is_ours(self, k: str, data: bytes) -> bool:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=k)
        except (bexc.BotoCoreError, bexc.ClientError):
            return False
        return str(head.get("ETag")) == etag_of(data)

    def _etag(self, key: str) -> str | None:
        """The object's ETag (a HEAD), None when there is no object."""
        k = self._k(key)
        try:
            head = self._call(f"head {key}", lambda: self.client.head_object(Bucket=self.bucket, Key=k))
        except bexc.ClientError as e:
            code, status = code_status(e)
            if status == 404 or code in _MISSING:
                return None
            raise self._fail("head", key, e) from e
        return str(head.get("ETag"))

    def exists(self, key: str) -> bool:
        return self._etag(key) is not None

    def delete(self, key: str) -> None:
        k = self._k(key)
        try:
            self._call(f"delete {key}", lambda: self.client.delete_object(Bucket=self.bucket, Key=k))
        except bexc.ClientError as e:
            if code_status(e)[0] in _MISSING:
                return
            raise self._fail("delete", key, e) from e

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self.prefix + prefix,
            "MaxKeys": self.page_size,
        }
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            try:
                page = self._call(f"list {prefix}", lambda: self.client.list_objects_v2(**kwargs))
            except bexc.ClientError as e:
                raise self._fail("list", prefix, e) from e
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            kwargs["ContinuationToken"] = token

    def list(self, prefix: str = "") -> Iterator[str]:
        check_prefix(prefix)
        return (key for key, _ in self.list_stamped(prefix))

    def list_stamped(self, prefix: str = "") -> Iterator[tuple[str, ListedStamp | None]]:
        check_prefix(prefix)
        cut = len(self.prefix)
        for page in self._pages(prefix, None):
            for obj in page.get("Contents", []) or []:
                etag = obj.get("ETag")
                yield obj["Key"][cut:], ([int(obj.get("Size") or 0), str(etag)] if etag else None)

    def list_children(self, prefix: str) -> Iterator[str]:
        check_prefix(prefix)
        base = prefix if prefix == "" or prefix.endswith("/") else prefix + "/"
        cut = len(self.prefix) + len(base)
        for page in self._pages(base, "/"):
            names = [p["Prefix"][cut:] for p in page.get("CommonPrefixes", []) or []]
            names += [o["Key"][cut:] for o in page.get("Contents", []) or []]
            yield from sorted(names, key=lambda n: n.encode("utf-8"))
