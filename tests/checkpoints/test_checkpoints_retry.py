"""Transient S3 faults are retried by the one tenacity layer; permanent ones are not.

Faults are injected with botocore event hooks on a real client talking to a real SeaweedFS:
a `before-send` handler answers the first N calls itself, so nothing reaches the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import botocore.exceptions as bexc
import pytest
import tenacity
from botocore.awsrequest import AWSResponse, HTTPHeaders

from checkpoints.retry import RetryPolicy, is_transient
from checkpoints.store import open_store
from checkpoints.store.s3 import S3Store
from docmill.errors import StoreError, TransientStoreError

NO_WAIT = RetryPolicy(attempts=5, initial_wait=0)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body


def error_response(status: int, code: str) -> Callable[..., AWSResponse]:
    body = (
        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>injected</Message></Error>"
    )

    def make(request: Any) -> AWSResponse:
        headers = HTTPHeaders()
        headers["Content-Type"] = "application/xml"
        return AWSResponse(request.url, status, headers, _Raw(body.encode()))

    return make


def connection_reset(request: Any) -> AWSResponse:
    raise bexc.ConnectionClosedError(endpoint_url=request.url)


def read_timeout(request: Any) -> AWSResponse:
    raise bexc.ReadTimeoutError(endpoint_url=request.url)


class Faults:
    """Answer the first `failures` sends of `operation` with `fault`; count every send."""

    def __init__(self, store: S3Store, operation: str, failures: int, fault: Callable[..., AWSResponse]):
        self.calls = 0
        self.failures = failures
        self.fault = fault
        store.client.meta.events.register(f"before-send.s3.{operation}", self)

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        self.calls += 1
        if self.calls <= self.failures:
            return self.fault(request)
        return None  # let it through to the server


@pytest.fixture
def s3(s3_store_uri: str) -> S3Store:
    store = open_store(s3_store_uri, retry=NO_WAIT)
    assert isinstance(store, S3Store)
    return store


TRANSIENT = {
    "503 SlowDown": error_response(503, "SlowDown"),
    "500 InternalError": error_response(500, "InternalError"),
    "connection reset": connection_reset,
    "read timeout": read_timeout,
}


@pytest.mark.parametrize("fault", list(TRANSIENT), ids=list(TRANSIENT))
@pytest.mark.parametrize("failures", [0, 1, 2, 4])
def test_transient_put_faults_are_retried(s3: S3Store, fault: str, failures: int) -> None:
    faults = Faults(s3, "PutObject", failures, TRANSIENT[fault])
    assert s3.put_if_absent("t/x.json", b"data") is True
    assert faults.calls == failures + 1
    assert s3.get("t/x.json") == b"data"


@pytest.mark.parametrize("failures", [1, 3])
def test_transient_get_and_list_faults_are_retried(s3: S3Store, failures: int) -> None:
    s3.put("g/x", b"1")
    gets = Faults(s3, "GetObject", failures, TRANSIENT["503 SlowDown"])
    lists = Faults(s3, "ListObjectsV2", failures, TRANSIENT["connection reset"])
    assert s3.get("g/x") == b"1"
    assert list(s3.list("g/")) == ["g/x"]
    assert (gets.calls, lists.calls) == (failures + 1, failures + 1)


def test_faults_outlasting_retries_raise_transient_store_error(s3: S3Store) -> None:
    faults = Faults(s3, "PutObject", 99, TRANSIENT["503 SlowDown"])
    with pytest.raises(TransientStoreError) as info:
        s3.put("t/y", b"x")
    assert faults.calls == NO_WAIT.attempts
    assert info.value.fields["attempts"] == NO_WAIT.attempts
    assert isinstance(info.value.__cause__, bexc.ClientError)  # the last fault, not a tenacity RetryError
    assert not isinstance(info.value.__cause__, tenacity.RetryError)
    assert "SlowDown" in str(info.value)


@pytest.mark.parametrize(
    ("status", "code"), [(403, "AccessDenied"), (400, "InvalidArgument"), (404, "NoSuchBucket")]
)
def test_permanent_faults_are_not_retried(s3: S3Store, status: int, code: str) -> None:
    faults = Faults(s3, "PutObject", 99, error_response(status, code))
    with pytest.raises(StoreError) as info:
        s3.put("t/z", b"x")
    assert faults.calls == 1
    assert not isinstance(info.value, TransientStoreError)
    assert code in str(info.value)
    assert "docmill-test-secret" not in str(info.value) + repr(info.value.__dict__)


def test_precondition_failure_is_not_retried(s3: S3Store) -> None:
    s3.put("p/x", b"1")
    faults = Faults(s3, "PutObject", 0, TRANSIENT["503 SlowDown"])
    assert s3.put_if_absent("p/x", b"2") is False
    assert faults.calls == 1


def test_cas_whose_answer_was_lost_is_recognised_as_ours(s3: S3Store) -> None:
    """The write lands, the reply is lost (reset after send), the retry sees 412: it was ours."""
    etag = s3.put("c/x", b"v1")
    state = {"calls": 0}

    def after(http_response: Any, **_: Any) -> None:
        state["calls"] += 1
        if state["calls"] == 1:
            raise bexc.ConnectionClosedError(endpoint_url="http://x")

    s3.client.meta.events.register("after-call.s3.PutObject", after)
    s3.put_if_match("c/x", b"v2", etag)
    assert s3.get("c/x") == b"v2"
    assert state["calls"] == 2


def client_error(status: int, code: str) -> bexc.ClientError:
    response: Any = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return bexc.ClientError(response, "PutObject")


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (
            client_error(503, "SlowDown"),
            True,
        ),
        (
            client_error(502, "X"),
            True,
        ),
        (
            client_error(400, "Throttling"),
            True,
        ),
        (
            client_error(429, "X"),
            True,
        ),
        (
            client_error(412, "PreconditionFailed"),
            False,
        ),
        (
            client_error(403, "AccessDenied"),
            False,
        ),
        (
            client_error(404, "NoSuchKey"),
            False,
        ),
        (bexc.EndpointConnectionError(endpoint_url="http://x"), True),
        (bexc.ConnectTimeoutError(endpoint_url="http://x"), True),
        (bexc.ReadTimeoutError(endpoint_url="http://x"), True),
        (ConnectionResetError(), True),
        (ValueError("bug"), False),
    ],
)
def test_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_missing_credentials_is_a_clear_store_error(
    s3_store_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = open_store(s3_store_uri, retry=NO_WAIT)
    with pytest.raises(StoreError) as info:
        store.put("x", b"1")
    assert "AWS_ACCESS_KEY_ID" in info.value.hint
