"""How the disk tier cuts a sequence's state into segments, and puts the
segments of a path back into one state: pure, on kvstate's cells.

A segment holds the full-attention cells of its positions (`base`) and, for
a model that resumes only where a state was kept, that state at its end
(`window`): the sliding window as it was there, or the recurrent state. A
segment ends at each such checkpoint after what is stored; other models'
segments end where their prompts ended (`ends`). See cache/disk.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import kvstate


@dataclass(frozen=True)
class Layout:
    windowed: bool  # two KV caches: full attention, then the sliding window
    recurrent: str = ""  # "hybrid" (attention + recurrent), "recurrent" (no attention), ""
    ext: bool = False  # cells carry M-RoPE positions (kvstate)

    @property
    def checkpointed(self) -> bool:
        """It resumes only where a window or recurrent state was kept."""
        return self.windowed or bool(self.recurrent)


# (end, base, window) of one segment
Piece = tuple[int, bytes, bytes]


def cut(
    layout: Layout,
    state: bytes,
    windows: list[tuple[int, bytes]],
    ends: list[int],
    start: int,
    n: int,
) -> list[Piece] | None:
    """The segments of a state of `n` tokens from `start` on (the part
    before is stored). None: its cells cannot be read apart (kvstate.
    Unparsed), so it is stored whole."""
    if layout.recurrent:
        return _cut_recurrent(layout, state, windows, start, n)
    try:
        caches = kvstate.parse(state, 2 if layout.windowed else 1, layout.ext)
    except kvstate.Unparsed:
        return None
    base, window = caches[0], caches[1] if layout.windowed else None
    if base is None or (layout.windowed and window is None):
        return []
    if layout.windowed:
        cuts: list[tuple[int, bytes | None]] = [(p, w) for p, w in sorted(windows) if start < p < n]
    else:
        cuts = [(p, None) for p in sorted(set(ends)) if start < p < n]
    # What follows a windowed model's last prompt is its answer, which the
    # next turn renders anew: a window there would serve nobody.
    tail = [] if layout.windowed and cuts else [(n, None)]
    out = []
    for end, win in [*cuts, *tail]:
        piece = kvstate.write([base.take(start, end)])
        win_blob = b""
        if layout.windowed:
            found = kvstate.write([window]) if win is None else _window_of(win, layout.ext)
            if found is None:
                continue
            win_blob = found
        out.append((end, piece, win_blob))
        start = end
    return out


def _cut_recurrent(
    layout: Layout, state: bytes, checkpoints: list[tuple[int, bytes]], start: int, n: int
) -> list[Piece] | None:
    """Segments ending at each checkpoint after `start`, each with the
    recurrent state there; the state's own end only where no checkpoint
    follows (what follows the last prompt's checkpoint is its answer, which
    the next turn renders anew)."""
    hybrid = layout.recurrent == "hybrid"
    try:
        cells, last = kvstate.split_recurrent(state, hybrid, layout.ext)
    except kvstate.Unparsed:
        return None
    cuts: list[tuple[int, bytes]] = []
    for pos, checkpoint in sorted(checkpoints):
        if start < pos < n:
            try:
                cuts.append((pos, kvstate.split_recurrent(checkpoint, False)[1]))
            except kvstate.Unparsed:
                continue
    out = []
    for end, recurrent in cuts or [(n, last)]:
        piece = kvstate.write([cells.take(start, end)]) if cells is not None else b""
        out.append((end, piece, recurrent))
        start = end
    return out


def assemble(layout: Layout, pieces: list[tuple[bytes, bytes]], n: int) -> bytes:
    """One state from the (base, window) of each segment on a path, the
    first first: `n` tokens of it (a checkpointed layout: to the end)."""
    cells = []
    for base, _ in pieces:
        parsed = kvstate.parse(base, 1, layout.ext)[0] if base else None
        if parsed is not None:
            cells.append(parsed)
    window = pieces[-1][1]
    if layout.recurrent:
        joined = kvstate.concat(cells) if cells else None
        return kvstate.join_recurrent(joined, window, layout.recurrent == "hybrid")
    full = kvstate.concat(cells)
    if layout.windowed:
        return kvstate.write([full, kvstate.parse(window, 1, layout.ext)[0]])
    return kvstate.write([full.take(0, n)])


def _window_of(checkpoint: bytes, ext: bool) -> bytes | None:
    """A partial (window-only) checkpoint, as the window part of a file."""
    try:
        window = kvstate.parse(checkpoint, 1, ext)[0]
    except kvstate.Unparsed:
        return None
    return kvstate.write([window]) if window is not None else None
