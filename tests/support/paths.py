"""Where the tests find the shared fixtures and keep what they build."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


SHARED = REPO.parent / "shared"


FIXTURES = SHARED / "fixtures"


# Built models and installed clients persist here between local runs (the
# directory is git-ignored; CI starts from a clean clone).
CACHE = REPO / ".engy-test"


def need_fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


ANSWER = "Hello from engy."
