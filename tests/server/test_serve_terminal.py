"""`engy serve` as a new user first sees it: in an 80-column terminal, on
the default model. The banner fits, no command in it is broken across
lines, it leads with `engy launch`, and llama.cpp's own lines stay out of it
unless --verbose asks for them."""

from __future__ import annotations

from pathlib import Path

from support.server import free_port
from support.terminal import serve_banner

LAST = "model gemma-3-270m"  # the banner's last line ends with it
# What llama.cpp printed raw before the banner, before engy took its log.
RAW = ("control-looking token", "n_ctx_seq", "llama_context", "load_tensors", "print_info")


def banner(text: str) -> list[str]:
    """The lines from `engy serving` on (the spinner's redraws before it)."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("engy serving"))
    return [line.rstrip() for line in lines[start:] if line.strip()]


def test_banner_fits_80_columns_and_leads_with_engy_launch(
    gemma_path: Path, engy_home: Path
) -> None:
    port = free_port()
    text = serve_banner("--port", str(port), home=engy_home, until=LAST)
    lines = banner(text)
    assert lines[0] == "engy serving gemma-3-270m (gemma-3-270m-q4_k_m.gguf)", text
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long, text
    url = f"http://127.0.0.1:{port}"
    # Each command and value to copy is whole, at the end of one line.
    assert f"  Claude Code   engy launch claude --port {port}" in lines, text
    assert f"  Codex         engy launch codex --port {port}" in lines, text
    assert f"  other tools   base URL {url}/v1" in lines, text
    assert "                model gemma-3-270m" in lines, text
    assert f"  url       {url}" in lines, text
    assert any("/v1/chat/completions" in line for line in lines), text
    assert not any("ANTHROPIC_BASE_URL" in line for line in lines), text
    context = next(line for line in lines if line.startswith("  context"))
    assert "32768 tokens per conversation, 4 conversations at once" in context
    for raw in RAW:
        assert raw not in text, text


def test_verbose_shows_llama_cpps_lines(gemma_path: Path, engy_home: Path) -> None:
    text = serve_banner("--port", str(free_port()), "--verbose", home=engy_home, until=LAST)
    assert "llama.cpp load: control-looking token:" in text, text[-4000:]
    assert "llama.cpp llama_context: n_ctx_seq (131072) > n_ctx_train (32768)" in text
    assert "loaded gemma-3-270m" in text  # engy's own load line too
    assert banner(text)[0].startswith("engy serving gemma-3-270m")
