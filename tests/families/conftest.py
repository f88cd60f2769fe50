"""The family suites' vocabularies, loaded once for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.families.grammars import Vocabs


@pytest.fixture(scope="session")
def vocabs() -> Iterator[Vocabs]:
    vocabs = Vocabs()
    yield vocabs
    vocabs.close()
