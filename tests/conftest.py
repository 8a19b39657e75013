"""Shared fixtures. Each area keeps its fixtures in tests/fixtures/<area>.py."""

pytest_plugins = [
    "tests.fixtures.today",
    "tests.fixtures.s3",
    "tests.fixtures.emulator",
    "tests.fixtures.prefect",
    "tests.fixtures.chromium",
]
