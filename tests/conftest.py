"""Shared fixtures. Each area keeps its fixtures in tests/fixtures/<area>.py."""

import os

from hypothesis import settings

pytest_plugins = [
    "tests.fixtures.today",
    "tests.fixtures.s3",
    "tests.fixtures.emulator",
    "tests.fixtures.prefect",
    "tests.fixtures.chromium",
]

# Property tests draw the same examples on every machine and every run: a red CI is reproducible
# (`DOCMILL_HYPOTHESIS_PROFILE=explore` draws new ones, for a session that hunts for edge cases).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("DOCMILL_HYPOTHESIS_PROFILE", "ci"))
