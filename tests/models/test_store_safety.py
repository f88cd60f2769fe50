"""The model store cannot be tricked: names from catalogs, `hf:` refs, URLs,
hub listings and manifests never write or delete outside the store, and
`engy rm` deletes only what the store wrote."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.hubserver import running_hub

from engy_local.errors import CatalogError, PullError
from engy_local.models.catalog import models_dir, parse_catalog
from engy_local.models.download import Download, fetch
from engy_local.models.pull import pull
from engy_local.models.store import MANIFEST, pulled, remove, write_manifest

GGUF_HEADER = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)  # no tensors, no keys


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("ENGY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("ENGY_CATALOG", raising=False)
    models_dir().mkdir(parents=True)
    yield tmp_path / "home"


def outside_files(root: Path, home: Path) -> set[Path]:
    """Every file under `root` that is not in the store."""
    return {p for p in root.rglob("*") if p.is_file() and home not in p.parents}


# ---- catalogs ------------------------------------------------------------------

HOSTILE_PATHS = [
    "../../evil.gguf",
    "/etc/evil.gguf",
    "C:\\evil.gguf",
    "C:evil.gguf",
    "sub\\..\\..\\evil.gguf",
    "sub/../../evil.gguf",
    "\\\\server\\share\\evil.gguf",
    "./..",
    "",
    "evil.gguf\x00.txt",
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_a_catalog_naming_a_path_outside_the_store_is_refused(path: str) -> None:
    toml = f"[models.m]\nhf = 'o/r'\nquant = 'Q8_0'\nfile = {json.dumps(path)}\n"
    with pytest.raises(CatalogError, match="unsafe"):
        parse_catalog(toml)
    mmproj = (
        "[models.m]\nhf = 'o/r'\nquant = 'Q8_0'\nfile = 'm-Q8_0.gguf'\n"
        f"mmproj = {{ file = {json.dumps(path)} }}\n"
    )
    with pytest.raises(CatalogError, match="unsafe"):
        parse_catalog(mmproj)


def test_a_catalog_with_repository_subfolders_is_fine() -> None:
    catalog = parse_catalog("[models.m]\nhf = 'o/r'\nquant = 'Q8_0'\nfile = 'Q8_0/m-Q8_0.gguf'\n")
    assert catalog.entries["m"].file == "Q8_0/m-Q8_0.gguf"


# ---- hub listings and URLs ---------------------------------------------------------

HOSTILE_NAMES = ["..\\..\\evil-Q8_0.gguf", "C:evil-Q8_0.gguf", "a:b-Q8_0.gguf"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hub_listing_with_a_hostile_name_writes_nothing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    with running_hub() as hub:
        hub.add(f"owner/repo/{name}", GGUF_HEADER)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(PullError, match="unsafe file name"):
            pull("hf:owner/repo")
        with pytest.raises(PullError, match="unsafe file name"):
            pull(f"hf:owner/repo:{name}")
    assert outside_files(tmp_path, home) == set()
    assert not list(models_dir().rglob("*.gguf*"))


def test_a_url_whose_name_is_hostile_writes_nothing(home: Path, tmp_path: Path) -> None:
    with running_hub() as hub:
        hub.add("files/x.gguf", GGUF_HEADER)
        for url in (f"{hub.url}/files/..\\..\\x.gguf", f"{hub.url}/files/a:x.gguf"):
            with pytest.raises(PullError, match="unsafe file name"):
                pull(url)
    assert outside_files(tmp_path, home) == set()


def test_a_planted_symlink_is_never_written_through(home: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    directory = models_dir() / "m@Q8_0"
    directory.mkdir()
    for name in ("m-Q8_0.gguf", "m-Q8_0.gguf.part"):
        (directory / name).unlink(missing_ok=True)
        (directory / name).symlink_to(victim)
        with running_hub() as hub, httpx.Client() as client:
            hub.add("files/m-Q8_0.gguf", GGUF_HEADER)
            job = Download(f"{hub.url}/files/m-Q8_0.gguf", directory / "m-Q8_0.gguf")
            with pytest.raises(PullError, match="symbolic link"):
                fetch(client, job)
        (directory / name).unlink()
    assert victim.read_text() == "precious"


# ---- manifests -----------------------------------------------------------------------


def manifest(directory: Path, files: list[str], owned: bool = True, **extra: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "id": directory.name.split("@")[0],
        "quant": "Q8_0",
        "source": "url",
        "owned": owned,
        "files": [{"path": f, "size": 1, "sha256": None} for f in files],
        "mmproj": None,
        **extra,
    }
    write_manifest(directory, record)


def test_manifests_pointing_outside_the_store_are_ignored_with_a_warning(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim = tmp_path / "victim.gguf"
    victim.write_bytes(GGUF_HEADER)
    root = models_dir()
    manifest(root / "dotdot@Q8_0", ["../../../victim.gguf"])
    manifest(root / "absolute@Q8_0", [str(victim)])  # owned, yet outside
    manifest(root / "mmproj@Q8_0", ["m.gguf"], mmproj={"path": "../../../victim.gguf"})
    (root / "mmproj@Q8_0" / "m.gguf").write_bytes(GGUF_HEADER)
    link = root / "link@Q8_0"
    link.mkdir()
    (link / "m.gguf").symlink_to(victim)
    manifest(link, ["m.gguf"])
    elsewhere = tmp_path / "elsewhere"
    manifest(elsewhere / "x@Q8_0", ["m.gguf"])
    (elsewhere / "x@Q8_0" / "m.gguf").write_bytes(GGUF_HEADER)
    (root / "dirlink@Q8_0").symlink_to(elsewhere / "x@Q8_0")
    # An imported file, by reference, not owned: legitimate.
    manifest(root / "imported@Q8_0", [str(victim)], owned=False)

    with caplog.at_level(logging.WARNING, logger="engy.store"):
        ids = [r.id for r in pulled()]
    assert ids == ["imported"]
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("dotdot", "absolute", "mmproj", "link", "dirlink"):
        assert f"{name}@Q8_0" in warned


def test_rm_deletes_only_what_the_store_wrote(home: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.gguf"
    victim.write_bytes(GGUF_HEADER)
    directory = models_dir() / "m@Q8_0"
    manifest(directory, ["m-Q8_0.gguf"])
    (directory / "m-Q8_0.gguf").write_bytes(GGUF_HEADER)
    (directory / "notes.txt").write_text("the user's")
    (directory / "link.gguf").symlink_to(victim)

    removed = remove("m")
    assert [r.id for r in removed.models] == ["m"]
    assert not (directory / "m-Q8_0.gguf").exists() and not (directory / MANIFEST).exists()
    assert (directory / "notes.txt").read_text() == "the user's"  # not the store's
    assert victim.read_bytes() == GGUF_HEADER

    # An unfinished pull: its parts go; a symlink's target never does.
    unfinished = models_dir() / "u@Q8_0"
    unfinished.mkdir()
    (unfinished / "u-Q8_0.gguf.part").write_bytes(b"GG")
    (unfinished / "u-Q8_0-00002-of-00002.gguf").symlink_to(victim)
    assert remove("u@Q8_0").unfinished == [unfinished]
    assert not unfinished.exists()
    assert victim.read_bytes() == GGUF_HEADER


def test_rm_never_follows_a_symlinked_model_directory(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "m-Q8_0.gguf.part").write_bytes(b"GG")
    (models_dir() / "m@Q8_0").symlink_to(elsewhere)
    with pytest.raises(CatalogError):
        remove("m")
    assert (elsewhere / "m-Q8_0.gguf.part").exists()
    assert not (elsewhere / ".lock").exists()
