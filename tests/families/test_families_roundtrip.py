"""A forced tool call round trip through a real `engy serve` for every
family's tiny GGUF (and the generic family's real default model), through
/v1/messages and /v1/responses, streaming and not, then a follow-up that
carries the call and its result (support/families/roundtrip.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support.families import CASES
from support.families.roundtrip import messages_round_trip, responses_round_trip, tiny_server
from support.families.spec import RoundTrip

TRIPS = [trip for case in CASES for trip in case.round_trips]


@dataclass(frozen=True)
class Served:
    trip: RoundTrip
    url: str


# Module-scoped and parametrized: pytest runs each server's tests together
# and stops it before starting the next.
@pytest.fixture(scope="module", params=TRIPS, ids=[t.name for t in TRIPS])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    trip: RoundTrip = request.param
    if trip.template is None:  # the real gemma-3-270m-base, shared by the session
        yield Served(trip, request.getfixturevalue("gemma_server").url)
        return
    with tiny_server(trip) as url:
        yield Served(trip, url)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_forced_call_round_trip(served: Served, stream: bool) -> None:
    messages_round_trip(served.url, served.trip, stream=stream)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_forced_call_round_trip(served: Served, stream: bool) -> None:
    responses_round_trip(served.url, served.trip, stream=stream)
