"""What the page does to models: list the installed ones, load and unload
(`backend.Manages`), pull and rm with the CLI's own store code.

A pull runs `models.pull.pull` on a thread of its own with a rich
`Progress` that draws nowhere: the page reads its tasks (file, bytes done,
total, speed) while it runs. When engy serves the store (no MODEL), a
pulled model is served at once and a removed one no longer (`StoreHooks`,
given by `engy serve`).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import Progress

from ..backend import Backend, Manages
from ..errors import Busy, CatalogError, EngyError, InvalidRequest, ModelNotFound
from ..models.elsewhere import OWNERS
from ..models.pull import pull
from ..models.store import Installed, installed, remove

KEEP = 20  # finished pulls still listed


@dataclass(frozen=True)
class StoreHooks:
    """What the server does when the store changes under it."""

    adopt: Callable[[Installed], None]  # serve a model just pulled
    forget: Callable[[str], None]  # stop serving a model just removed


@dataclass(eq=False)
class PullJob:
    id: int
    ref: str
    started: float
    state: str = "pulling"  # pulling, waiting (for another pull of it), done, failed
    error: str = ""
    model: str = ""  # the installed id, once done
    ended: float | None = None
    progress: Progress = field(
        default_factory=lambda: Progress(
            console=Console(file=io.StringIO(), width=80), auto_refresh=False
        )
    )

    def to_json(self) -> dict[str, Any]:
        files = [
            {
                "name": t.description,
                "done": int(t.completed),
                "total": None if t.total is None else int(t.total),
                "speed": None if t.speed is None else int(t.speed),
            }
            for t in self.progress.tasks
        ]
        return {
            "id": self.id,
            "ref": self.ref,
            "state": self.state,
            "error": self.error,
            "model": self.model,
            "started": self.started,
            "ended": self.ended,
            "files": files,
        }


class Pulls:
    """Pulls started from the page, running and recently finished."""

    def __init__(self, hooks: StoreHooks | None = None) -> None:
        self.hooks = hooks
        self.jobs: list[PullJob] = []
        self.version = 0  # bumped when a pull starts or ends
        self._count = 0
        self._lock = threading.Lock()

    def start(self, ref: str) -> PullJob:
        ref = ref.strip()
        if not ref:
            raise InvalidRequest("ref: name a model to pull", param="ref")
        with self._lock:
            if any(j.ref == ref and j.state in ("pulling", "waiting") for j in self.jobs):
                raise Busy(f"{ref} is being pulled already", retry_after=5)
            self._count += 1
            job = PullJob(self._count, ref, time.time())
            done = [j for j in self.jobs if j.ended is not None][-KEEP:]
            self.jobs = [*done, *(j for j in self.jobs if j.ended is None), job]
            self.version += 1
        threading.Thread(target=self._run, args=(job,), name="engy-pull", daemon=True).start()
        return job

    def _run(self, job: PullJob) -> None:
        def waiting() -> None:
            job.state = "waiting"

        try:
            record = pull(job.ref, job.progress, waiting)
            job.model = record.id
            if self.hooks is not None:
                self.hooks.adopt(record)
            job.state = "done"
        except EngyError as exc:
            job.error, job.state = exc.message, "failed"
        except Exception as exc:  # a pull must not take the server with it
            job.error, job.state = f"{type(exc).__name__}: {exc}", "failed"
        finally:
            job.ended = time.time()
            job.progress.stop()
            with self._lock:
                self.version += 1

    def active(self) -> bool:
        return any(j.ended is None for j in self.jobs)

    def to_json(self) -> list[dict[str, Any]]:
        return [j.to_json() for j in self.jobs]


def installed_json(backend: Backend) -> list[dict[str, Any]]:
    """The store's models (and the Hugging Face cache's), each with whether
    this server serves it and whether it is loaded. Blocking (reads the
    store): call it off the event loop."""
    served = {m.id for m in backend.models()}
    loaded = {s.id for s in backend.status()}
    out = []
    for record in installed():
        out.append(
            {
                "id": record.id,
                "quant": record.quant,
                "size": record.size or sum(p.stat().st_size for p in record.files if p.exists()),
                "context": record.context,
                "family": record.family,
                "source": record.source,
                "file": record.path.name,
                "images": record.mmproj is not None,
                "served": record.id in served,
                "loaded": record.id in loaded,
                # another tool's file (the HF cache, Ollama, LM Studio, a folder) is never removed
                "removable": record.source not in ("pypi", *OWNERS),
            }
        )
    return out


def _manages(backend: Backend) -> Manages:
    if not isinstance(backend, Manages):
        raise InvalidRequest("this server's backend cannot load or unload models")
    return backend


def load(backend: Backend, model: str) -> dict[str, Any]:
    """Blocking (a load takes seconds)."""
    info = _manages(backend).load(model)
    return {"loaded": info.id}


def unload(backend: Backend, model: str) -> dict[str, Any]:
    manager = _manages(backend)
    model_id = backend.resolve(model).id
    if not manager.unload(model_id) and any(s.id == model_id for s in backend.status()):
        raise Busy(f"{model_id} is busy; unload it when its requests are done", retry_after=5)
    return {"unloaded": model_id}


def rm(backend: Backend, hooks: StoreHooks | None, model: str) -> dict[str, Any]:
    """`engy rm MODEL`, after unloading it if it is loaded (refused while
    it is busy). Blocking."""
    try:
        model_id = backend.resolve(model).id
    except ModelNotFound:
        model_id = model
    if any(s.id == model_id for s in backend.status()):
        unload(backend, model_id)
    try:
        removed = remove(model)
    except CatalogError as exc:
        raise InvalidRequest(exc.message) from None
    names = [r.id for r in removed.models]
    if hooks is not None:
        for name in dict.fromkeys([model_id, *names]):
            hooks.forget(name)
    return {"removed": names, "unfinished": [str(p) for p in removed.unfinished]}
