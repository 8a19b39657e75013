"""The environment is the lock: every package requirements.lock pins for this platform is installed at
exactly that version, with a hash, and nothing else is installed beside docmill and the venv's own pip.
`make lock` is the only way a version moves (README, "Versions")."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

LOCK = Path(__file__).resolve().parents[2] / "requirements.lock"
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$"
)
# Not in the lock on purpose: the venv's own installer (`python -m venv` seeds it) and docmill itself.
NOT_LOCKED = {"pip", "docmill"}


def parse_lock(text: str) -> dict[str, tuple[str, str | None, int]]:
    """name -> (version, marker or None, number of hashes), for every pin of the lock."""
    pins: dict[str, tuple[str, str | None, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = PIN.match(line)
        if m:
            current = canonicalize_name(m["name"])
            assert current not in pins or pins[current][1], f"{current} pinned twice without markers"
            key = current if current not in pins else f"{current} ; {m['marker']}"
            pins[key] = (m["version"], m["marker"], 0)
            current = key
        elif current and line.strip().startswith("--hash=sha256:"):
            version, marker, n = pins[current]
            pins[current] = (version, marker, n + 1)
    return pins


def wanted_here(pins: dict[str, tuple[str, str | None, int]]) -> dict[str, str]:
    """name -> version of the pins whose markers hold on this interpreter and platform."""
    out: dict[str, str] = {}
    for key, (version, marker, _) in pins.items():
        if marker is None or Marker(marker).evaluate():
            out[canonicalize_name(key.split(" ; ")[0])] = version
    return out


def test_the_lock_parser_sees_pins_markers_and_hashes() -> None:
    text = (
        "a-b==1.0 \\\n    --hash=sha256:00 \\\n    --hash=sha256:11\n"
        "c==2 ; sys_platform == 'win32' \\\n    --hash=sha256:22\n"
    )
    pins = parse_lock(text)
    assert pins == {"a-b": ("1.0", None, 2), "c": ("2", "sys_platform == 'win32'", 1)}
    assert wanted_here(pins) == {"a-b": "1.0"}


def test_every_locked_package_has_hashes() -> None:
    pins = parse_lock(LOCK.read_text())
    assert len(pins) > 50
    assert [name for name, (_, _, hashes) in pins.items() if hashes == 0] == []


def test_the_environment_equals_the_lock() -> None:
    wanted = wanted_here(parse_lock(LOCK.read_text()))
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    for name in NOT_LOCKED:
        installed.pop(name, None)
    missing_or_other = {n: (v, installed.get(n)) for n, v in wanted.items() if installed.get(n) != v}
    extra = sorted(set(installed) - set(wanted))
    assert missing_or_other == {}, "installed versions differ from requirements.lock: run `make` again"
    assert extra == [], "installed but not in requirements.lock (install only through the lock)"
