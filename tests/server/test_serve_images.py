"""How `engy serve` finds a model's vision projector: `--mmproj PATH` for
the model named, or the store's record (pull brings it along)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engy_local.errors import CatalogError
from engy_local.server.backends import resolve_model
from engy_local.server.options import ServeOptions


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENGY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_mmproj_goes_with_the_model_given_by_path(
    home: Path, tiny_vision: tuple[Path, Path]
) -> None:
    model, projector = tiny_vision
    served = resolve_model(str(model), ServeOptions(mmproj=projector))
    assert served.options.mmproj == projector
    assert resolve_model(str(model), ServeOptions()).options.mmproj is None


def test_a_missing_mmproj_is_one_clear_error(home: Path, tiny_vision: tuple[Path, Path]) -> None:
    model, _ = tiny_vision
    with pytest.raises(CatalogError, match=r"no such file: .*nowhere\.gguf"):
        resolve_model(str(model), ServeOptions(mmproj=home / "nowhere.gguf"))
