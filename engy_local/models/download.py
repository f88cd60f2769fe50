"""Fetching one file over HTTP: resumable, verified, atomic.

A file is written to `<name>.part` next to where it belongs. A later run
that finds the `.part` asks the server for the rest only (HTTP Range) and
appends it; a server that ignores the Range gets the file from the start.
When the last byte is in, the file is checked — its length against what the
server announced, its sha256 when one is known (given, or published by the
Hugging Face hub in `X-Linked-Etag`), and its GGUF header — and only then
renamed into place.

What happens to the `.part` when something goes wrong:
- connection dropped, timeout, disk full, HTTP error: kept, to resume from;
- complete but wrong (sha256 mismatch, wrong length, not a GGUF): deleted,
  since more bytes cannot repair it; the next run fetches the file anew.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from ..errors import NotGGUF, PullError
from .ggufmeta import read_metadata

CHUNK = 1 << 20
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_CONTENT_RANGE = re.compile(r"bytes (?:(\d+)-\d+|\*)/(\d+)")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Download:
    url: str
    dest: Path
    sha256: str | None = None  # expected, when published
    size: int | None = None  # expected exact length, when published
    headers: tuple[tuple[str, str], ...] = ()  # e.g. the Hugging Face token
    part_of: tuple[int, int] | None = None  # (number, count) for a split GGUF's part
    hub: bool = False  # from the Hugging Face hub (HF_TOKEN applies)

    @property
    def label(self) -> str:
        return self.dest.name


@dataclass(frozen=True)
class Fetched:
    path: Path
    size: int
    sha256: str | None  # what the file hashed to (None: it was already in place)
    received: int  # bytes that came over the network in this run


def progress_bar(console: Console | None = None) -> Progress:
    """The bar `engy pull` shows: file, bar, size, speed, time left."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _hub_sha256(response: httpx.Response) -> str | None:
    """The sha256 the Hugging Face hub publishes for an LFS file, on the
    resolve response before its redirect."""
    for r in (*response.history, response):
        tag = str(r.headers.get("x-linked-etag", "")).removeprefix("W/").strip('"')
        if _SHA256.match(tag):
            return tag
    return None


def _hash_file(path: Path, hasher: Any) -> None:
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            hasher.update(block)


def _status_error(job: Download, response: httpx.Response) -> PullError:
    code = response.status_code
    where = f"{job.label}: HTTP {code} from {job.url}"
    if code == 404:
        return PullError(f"{job.label}: not found (HTTP 404) at {job.url}")
    if code in (401, 403):
        hint = ""
        if job.hub:
            hint = "; HF_TOKEN has no access to it" if job.headers else "; gated? set HF_TOKEN"
        return PullError(f"{where}: access denied{hint}")
    return PullError(where)


def _verify(job: Download, part: Path, size: int, digest: str, expected_sha: str | None) -> None:
    """Raise (after deleting `part`) unless the complete file is right."""
    problem = None
    if job.size is not None and size != job.size:
        problem = f"is {size} bytes, expected {job.size}"
    elif expected_sha and digest != expected_sha:
        problem = f"has sha256 {digest}, expected {expected_sha}"
    else:
        try:
            meta = read_metadata(part)
        except NotGGUF as exc:
            problem = f"is not a valid GGUF file ({exc})"
        else:
            if job.part_of is not None:
                number, count = job.part_of
                found = (meta.get("split.no", 0) + 1, meta.get("split.count", 1))
                if found != (number, count):
                    problem = f"says it is part {found[0]} of {found[1]}, not {number} of {count}"
    if problem:
        part.unlink(missing_ok=True)
        raise PullError(f"{job.label} {problem}: discarded it; run again to download it anew")


def fetch(
    client: httpx.Client, job: Download, progress: Progress | None = None, _retry: bool = True
) -> Fetched:
    """Bring `job.url` to `job.dest` (see the module's docstring)."""
    part = job.dest.with_name(job.dest.name + ".part")
    for path in (job.dest, part, job.dest.parent):
        if path.is_symlink():  # planted: writing through it would land elsewhere
            raise PullError(f"{path} is a symbolic link; refusing to write through it")
    if job.dest.is_file():
        return Fetched(job.dest, job.dest.stat().st_size, None, 0)
    have = part.stat().st_size if part.is_file() else 0
    # identity: Range counts the bytes of the file itself, not of a compressed stream
    headers = {**dict(job.headers), "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    hasher = hashlib.sha256()
    received = 0
    total: int | None = None
    task: TaskID | None = None
    try:
        with client.stream("GET", job.url, headers=headers) as response:
            code = response.status_code
            m = _CONTENT_RANGE.match(response.headers.get("content-range", ""))
            if code == 416 and have:
                # Nothing left to send: the .part is complete, or not this file at all.
                total = int(m.group(2)) if m else -1
                if total != have:
                    part.unlink()
                    if _retry:
                        return fetch(client, job, progress, _retry=False)
                    raise PullError(f"{job.label}: the server refuses to resume it")
                expected_sha = job.sha256 or _hub_sha256(response)
                _hash_file(part, hasher)
                _verify(job, part, have, hasher.hexdigest(), expected_sha)
                os.replace(part, job.dest)
                return Fetched(job.dest, have, hasher.hexdigest(), 0)
            if code >= 400:
                raise _status_error(job, response)
            if code == 206 and m and m.group(1) is not None and int(m.group(1)) == have:
                total = int(m.group(2))
                _hash_file(part, hasher)
                mode = "ab"
            else:  # the whole file, from the start
                have, mode = 0, "wb"
                length = response.headers.get("content-length")
                total = int(length) if length and length.isdigit() else None
            expected_sha = job.sha256 or _hub_sha256(response)
            if progress is not None:
                if not progress.live.is_started:
                    progress.start()
                task = progress.add_task(job.label, total=total, completed=have)
            job.dest.parent.mkdir(parents=True, exist_ok=True)
            with part.open(mode) as f:
                for chunk in response.iter_raw():  # written as it comes: none lost on a drop
                    f.write(chunk)
                    hasher.update(chunk)
                    received += len(chunk)
                    if task is not None and progress is not None:
                        progress.advance(task, len(chunk))
                f.flush()
                os.fsync(f.fileno())
    except httpx.TransportError as exc:
        kept = part.stat().st_size if part.is_file() else 0
        raise PullError(
            f"{job.label}: connection lost ({type(exc).__name__}: {exc or 'no details'}); "
            f"{kept} bytes kept, run the same command again to resume"
        ) from None
    except OSError as exc:
        if exc.errno in _NO_ROOM:
            kept = part.stat().st_size if part.is_file() else 0
            raise PullError(
                f"{job.label}: no space left in {job.dest.parent} ({exc.strerror}); "
                f"{kept} bytes kept, free some space and run again to resume"
            ) from None
        raise PullError(f"{job.label}: {exc.strerror or exc} ({exc.filename or part})") from None
    size = have + received
    if total is not None and size < total:
        raise PullError(
            f"{job.label}: the server stopped after {size} of {total} bytes; "
            "run the same command again to resume"
        )
    digest = hasher.hexdigest()
    _verify(job, part, size, digest, expected_sha)
    os.replace(part, job.dest)
    return Fetched(job.dest, size, digest, received)
