"""Models shipped as wheels of data (the default model): assembled once into
the store from the installed distributions' files, checked against the
pinned sha256, and a clear word on what to run when a piece is missing or
the hash differs. The distributions here are real ones on a path of the
test's own (metadata and data files laid out as pip installs them)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engy_local.errors import CatalogError
from engy_local.models.catalog import Entry
from engy_local.models.embedded import assemble, assembled, pieces
from engy_local.models.store import installed

PIECES = {"demo-part1": [b"GGUF" + b"a" * 1000], "demo-part2": [b"b" * 700, b"c" * 300]}
WHOLE = b"".join(b for name in sorted(PIECES) for b in PIECES[name])


def _install(site: Path, name: str, blobs: list[bytes]) -> None:
    """Lay out `name` as pip would: its package's data files and a dist-info
    whose RECORD lists them."""
    module = name.replace("-", "_")
    data = site / module / "data"
    data.mkdir(parents=True)
    record = []
    for i, blob in enumerate(blobs, start=1):
        (data / f"part{i:02d}.bin").write_bytes(blob)
        record.append(f"{module}/data/part{i:02d}.bin,,")
    (data / "NOTICE.md").write_text("not a piece")
    record.append(f"{module}/data/NOTICE.md,,")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    site = tmp_path / "site"
    for name, blobs in PIECES.items():
        _install(site, name, blobs)
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENGY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hf-cache"))
    return tmp_path / "home"


ENTRY = Entry(
    id="demo:tiny",
    name="Demo",
    file="demo.gguf",
    pypi=("demo-part1", "demo-part2"),
    sha256=hashlib.sha256(WHOLE).hexdigest(),
    quant="Q4_K_M",
    context=4096,
    family="demo",
)


def test_pieces_are_the_data_files_in_order(site: Path) -> None:
    found = pieces(ENTRY)
    assert [p.name for p in found] == ["part01.bin", "part01.bin", "part02.bin"]
    assert b"".join(p.read_bytes() for p in found) == WHOLE


def test_assembled_once_into_the_store_with_a_manifest(site: Path, home: Path) -> None:
    assert assembled(ENTRY) is None
    path = assemble(ENTRY)
    assert path.read_bytes() == WHOLE and path.is_relative_to(home)
    (record,) = installed(hf_cache=False)
    assert record.id == "demo:tiny" and record.source == "pypi" and record.path == path
    assert record.sha256 == (ENTRY.sha256,)
    stamp = path.stat().st_mtime_ns
    assert assemble(ENTRY) == path and path.stat().st_mtime_ns == stamp  # not written again
    assert not list(path.parent.glob("*.part"))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda e: replace(e, pypi=("demo-part1", "demo-part9")), "demo-part9 is not installed"),
        (lambda e: replace(e, sha256="0" * 64), "not the pinned " + "0" * 64),
    ],
    ids=["a package missing", "the hash differs"],
)
def test_what_cannot_be_assembled_says_what_to_run(
    site: Path, home: Path, change: object, says: str
) -> None:
    entry = change(ENTRY)  # type: ignore[operator]
    with pytest.raises(CatalogError) as err:
        assemble(entry)
    assert (
        says in str(err.value)
        and "pip install" in str(err.value)
        and "default-model" in str(err.value)
    )
    assert assembled(entry) is None and installed(hf_cache=False) == []
    directory = home / "models"
    assert not list(directory.rglob("*.gguf")) and not list(directory.rglob("*.part"))


def test_a_piece_removed_after_install_is_named(site: Path, home: Path) -> None:
    gone = site / "demo_part2" / "data" / "part02.bin"
    gone.unlink()
    with pytest.raises(CatalogError) as err:
        assemble(ENTRY)
    assert str(gone) in str(err.value) and "--force-reinstall" in str(err.value)


def test_the_readme_run_command_installs_the_default_model() -> None:
    """The README's run command installs the `default-model` extra and runs
    `engy serve`; that extra pins exactly the wheels the catalog's default
    is assembled from, so the command serves it on a fresh machine."""
    import re

    import tomllib
    from support.paths import REPO

    from engy_local.models.catalog import load_catalog

    readme = (REPO / "README.md").read_text()
    run = next(line for line in readme.splitlines() if "[default-model]" in line)
    assert run.endswith(".venv/bin/engy serve"), run
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["default-model"]
    catalog = load_catalog()
    entry = catalog.entries[catalog.default]
    assert [re.split(r"[=<>]", pin)[0] for pin in extra] == list(entry.pypi)
    assert all("==" in pin for pin in extra)  # pinned: the pieces never change under the hash
    assert entry.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
