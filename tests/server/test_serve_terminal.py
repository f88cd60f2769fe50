"""`engy serve` as a new user first sees it: in an 80-column terminal, on
the default model. The banner fits, no command in it is broken across
lines, it leads with `engy launch`, and llama.cpp's own lines stay out of it
unless --verbose asks for them."""

from __future__ import annotations

from pathlib import Path

from support.server import free_port
from support.terminal import serve_banner

DEFAULT = "qwen2.5-coder:0.5b"
LAST = f"model {DEFAULT}"  # the banner's last line ends with it
# What llama.cpp printed raw before the banner, before engy took its log.
RAW = ("control-looking token", "n_ctx_seq", "llama_context", "load_tensors", "print_info")


def banner(text: str) -> list[str]:
    """The lines from `engy serving` on (the spinner's redraws before it)."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("engy serving"))
    return [line.rstrip() for line in lines[start:] if line.strip()]


def test_banner_fits_80_columns_and_leads_with_engy_launch(
    default_path: Path, engy_home: Path
) -> None:
    port = free_port()
    text = serve_banner("--port", str(port), home=engy_home, until=LAST)
    lines = banner(text)
    assert lines[0] == f"engy serving {DEFAULT} (qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)", text
    # What the starter is, and what to pull for real work, come first.
    assert lines[1].startswith("  starter   a 0.5B coding model"), text
    assert lines[2].startswith("            For real work here (about "), text
    assert lines[3].startswith("            engy pull qwen3"), text
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long, text
    url = f"http://127.0.0.1:{port}"
    # Each command and value to copy is whole, at the end of one line.
    assert f"  Claude Code   engy launch claude --port {port}" in lines, text
    assert f"  Codex         engy launch codex --port {port}" in lines, text
    assert f"  other tools   base URL {url}/v1" in lines, text
    assert f"                model {DEFAULT}" in lines, text
    assert f"  url       {url}" in lines, text
    assert any("/v1/chat/completions" in line for line in lines), text
    assert not any("ANTHROPIC_BASE_URL" in line for line in lines), text
    context = next(line for line in lines if line.startswith("  context"))
    assert "32768 tokens per conversation, 4 conversations at once" in context
    for raw in RAW:
        assert raw not in text, text


def test_verbose_shows_llama_cpps_lines(default_path: Path, engy_home: Path) -> None:
    text = serve_banner("--port", str(free_port()), "--verbose", home=engy_home, until=LAST)
    assert "llama.cpp load: control-looking token:" in text, text[-4000:]
    assert "llama.cpp llama_context: n_ctx_seq (131072) > n_ctx_train (32768)" in text
    assert f"loaded {DEFAULT}" in text  # engy's own load line too
    assert banner(text)[0].startswith(f"engy serving {DEFAULT}")
