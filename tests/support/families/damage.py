"""Random damaged outputs for the `Damage` rows: realistic outputs spliced
and damaged, or plausible calls written in the family's syntax and damaged.
Each yields (output, where to cut it), drawing from one seeded generator."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any


def spliced(
    good: Sequence[str], pieces: Sequence[str], n: int, seed: int
) -> Iterator[tuple[str, int]]:
    """`n` outputs: realistic ones spliced together, then damaged a little
    (cut, pieces deleted, markers and junk inserted); cut a third in."""
    rng = random.Random(seed)
    for _ in range(n):
        output = "".join(rng.choice(good) for _ in range(rng.randint(1, 2)))
        for _ in range(rng.randrange(5)):
            at, kind = rng.randint(0, len(output)), rng.random()
            if kind < 0.35:
                output = output[:at] + output[at + rng.randint(1, 8) :]
            elif kind < 0.8:
                output = output[:at] + rng.choice(pieces) + output[at:]
            else:
                output = output[:at]
        yield output, len(output) // 3


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(6 if depth < 2 else 4)
    if kind == 0:
        return rng.choice([True, False, None, 0, -12, 3.25])
    if kind in (1, 2, 3):
        return "".join(rng.choice('ab "\\\n}{<>/=\u00e9') for _ in range(rng.randrange(8)))
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(3))}


def written(
    seed: str,
    write: Callable[[str, dict[str, Any]], str],
    names: Collection[str],
    pieces: Sequence[str],
) -> Iterator[tuple[str, int]]:
    """400 plausible outputs (`write` gives one call in the family's syntax,
    to one of `names` or to a tool not offered), then damaged a little; cut
    anywhere."""
    rng = random.Random(seed)
    names = [*names, "nope"]
    keys = ["command", "timeout", "options", "content", "file_path", "x"]
    for _ in range(400):
        parts = []
        for _ in range(rng.randrange(4)):
            if rng.random() < 0.4:
                parts.append(rng.choice(["Sure.", "a < b\n", " ok ", "\n"]))
            else:
                args = {k: _random_value(rng) for k in rng.sample(keys, rng.randrange(3))}
                parts.append(write(rng.choice(names), args))
        output = "".join(parts)
        for _ in range(rng.randrange(4)):
            at, kind = rng.randint(0, len(output)), rng.random()
            if kind < 0.4:
                output = output[:at] + output[at + rng.randint(1, 5) :]
            elif kind < 0.8:
                output = output[:at] + rng.choice(pieces) + output[at:]
            else:
                output = output[:at]
        yield output, rng.randint(0, len(output))
