"""engy's memory estimate, which `engy list` and `engy models` judge the fit
by, against what llama.cpp allocates for Qwen2.5-Coder-0.5B-Instruct served
in place from an LM Studio folder, with a q8_0 KV cache."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from support.realmodels import QWEN_05B, need
from support.server import EngyServer

from engy_local.runtime.loading.fit import Machine, estimate

WINDOW = 8192
PARALLEL = 4


def test_the_kv_estimate_is_what_llama_cpp_allocates(tmp_path: Path) -> None:
    gguf = need(QWEN_05B)
    home = tmp_path / "user"
    folder = home / ".lmstudio" / "models" / "Qwen" / "Qwen2.5-Coder-0.5B-Instruct-GGUF"
    folder.mkdir(parents=True)
    (folder / gguf.name).symlink_to(gguf)  # LM Studio's folder, without a 0.5 GB copy
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.delenv("ENGY_MODELS_DIRS", raising=False)
        server = EngyServer(
            gguf.stem, "--ctx-size", str(WINDOW), "-ctk", "q8_0", "-ctv", "q8_0", home=tmp_path
        )
    try:
        (loaded,) = httpx.get(server.url + "/engy/ps").json()["models"]
    finally:
        server.stop()
    machine = Machine((), (), 1 << 40)
    q8 = estimate((gguf,), 0, machine, WINDOW, PARALLEL, "q8_0", "q8_0")
    f16 = estimate((gguf,), 0, machine, WINDOW, PARALLEL)
    assert q8.kv is not None and f16.kv is not None
    assert loaded["kv_bytes"] > 0
    assert abs(loaded["kv_bytes"] - q8.kv) <= q8.kv * 0.01, (loaded["kv_bytes"], q8.kv)
    assert q8.weights == os.path.getsize(gguf) and q8.kv < f16.kv
