"""backend.py: what `engy ps` and the page read of a loaded model survives
the trip through JSON (GET /engy/ps, /engy/status)."""

from __future__ import annotations

import json

from engy_local.backend import CacheStatus, ModelStatus, SequenceStatus


def test_model_status_round_trips_through_json() -> None:
    status = ModelStatus(
        id="m",
        context_length=8192,
        backend="CPU",
        cost=1 << 30,
        keep_alive_left=12.5,
        aliases=("a",),
        sequences=[SequenceStatus(0, 700, busy=True)],
        caches=[
            CacheStatus(
                "ram", entries=3, bytes=5 << 20, budget=2 << 30, hits=2, restored_tokens=1400
            ),
            CacheStatus("disk", entries=1, bytes=9 << 20, budget=20 << 30),
        ],
    )
    assert ModelStatus.from_json(json.loads(json.dumps(status.to_json()))) == status


def test_an_older_or_newer_server_still_reads() -> None:
    raw = {"id": "m", "context_length": 1, "backend": "CPU", "cost": 1, "keep_alive_left": None}
    assert ModelStatus.from_json(raw).caches == []
    newer = {
        **raw,
        "caches": [{"tier": "ram", "entries": 1, "bytes": 2, "budget": 3, "new": 1}, {"tier": "x"}],
    }
    assert ModelStatus.from_json(newer).caches == [CacheStatus("ram", 1, 2, 3)]
