"""What the command line checks before anything runs, so that every configuration, flag and store
problem exits 2 with one line naming the setting (the exit-code table: README.md, flows/cli/main.py)."""

from __future__ import annotations

import argparse
import os
import re
import secrets
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

from pydantic import BaseModel, TypeAdapter, ValidationError

from docmill.errors import ConfigError, InputError
from docmill.settings import Settings
from flows.cli.exit_codes import EXIT_INPUT

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr and exit 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        print(f"docmill: ConfigError: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_INPUT)


def _field(dotted: str) -> Any:
    model: type[BaseModel] = Settings
    *path, leaf = dotted.split(".")
    for name in path:
        model = model.model_fields[name].annotation  # type: ignore[assignment]
    return model.model_fields[leaf]


def setting_flag(dotted: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse `type` that checks a flag's value against the setting it sets."""
    field = _field(dotted)
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[field.annotation, field])  # type: ignore[arg-type]
    env = "DOCMILL_" + dotted.replace(".", "__").upper()

    def convert(text: str) -> Any:
        try:
            return adapter.validate_python(parse(text))
        except (ValueError, ValidationError) as e:
            msgs = e.errors() if isinstance(e, ValidationError) else [{"msg": str(e)}]
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a valid {dotted} ({env}): {msgs[0]['msg']}"
            ) from None

    convert.__name__ = dotted  # argparse names the type in its messages
    return convert


def run_id_flag(text: str) -> str:
    """A run id that is safe as one store path segment."""
    if not RUN_ID.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid run id: use letters, digits, '.', '_' or '-' (at most 128, no '/')"
        )
    return text


def check_store(store: ObjectStore, uri: str) -> None:
    """Write, read and remove a probe object; a store that cannot is a ConfigError naming the setting."""
    key = f"probes/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}.json"
    try:
        store.put_json(key, {"probe": True})
        store.get_json(key)
        store.delete(key)
    except Exception as e:  # permission, read-only or pseudo file system, credentials, no bucket
        detail = " ".join(str(e).split())[:200]
        raise ConfigError(
            f"store {uri!r} is not usable: {type(e).__name__}: {detail}",
            hint="set --store / DOCMILL_STORE to a writable folder or s3://bucket/prefix "
            "(S3: AWS credentials, DOCMILL_S3_ENDPOINT_URL)",
        ) from e


def known_run(store: ObjectStore, run_id: str) -> None:
    """InputError unless the store has a manifest for `run_id`."""
    if not store.exists(f"runs/{run_id}/manifest.json"):
        raise InputError(f"no run {run_id!r} in this store", hint="see `docmill runs` (and --store)")
