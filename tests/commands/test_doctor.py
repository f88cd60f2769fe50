"""`engy doctor` on real models: it passes where an agent would work (the
default gemma, the tiny Qwen3-template model) and fails, with a line that
says why, where it would not (no chat template; a template that refuses
tools)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from support.paths import CACHE, need_fixtures

from engy_local.commands.doctor import Check, DoctorOptions, Report, run_doctor

MODEL_CHECKS = (
    "model loads",
    "template renders tools",
    "tool-call family",
    "forced tool call",
    "thinking",
    "second turn from cache",
    "context window",
)

# A ChatML template that will not take tools at all.
REFUSES_TOOLS = (
    "{%- if tools %}{{ raise_exception('This model does not support tools.') }}{%- endif %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{{ message.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def doctor(model: str | None) -> tuple[Report, dict[str, Check]]:
    report = run_doctor(DoctorOptions(model), Console(file=io.StringIO()))
    return report, {c.name: c for c in report.checks}


def assert_model_checks_pass(report: Report, checks: dict[str, Check]) -> None:
    failed = [c for c in report.checks if c.status == "fail"]
    assert report.passed, failed
    for name in MODEL_CHECKS:
        # A window under 100k is a warning: Claude Code compacts only past it.
        ok = ("pass", "warn") if name == "context window" else ("pass",)
        assert checks[name].status in ok, checks[name]


def test_doctor_passes_on_a_tiny_model(tiny_qwen3: Path) -> None:
    report, checks = doctor(str(tiny_qwen3))
    assert_model_checks_pass(report, checks)
    assert report.model == tiny_qwen3.stem
    assert checks["CPU guard"].status == "pass" and "repacking" in checks["CPU guard"].figure
    assert checks["tool-call family"].figure.startswith("hermes")
    assert checks["forced tool call"].figure.startswith('get_weather({"city": ')
    assert "<think>" in checks["thinking"].figure  # Qwen3 thinks, and it splits
    cached, _, prompt = checks["second turn from cache"].figure.partition(" of ")
    assert 0 < int(cached) < int(prompt.split()[0])
    window = checks["context window"]
    assert window.figure == "32768 tokens as loaded" and window.status == "warn"
    assert "compacts at about 67k" in window.fix


def test_doctor_passes_on_the_default_model(default_path: Path) -> None:
    report, checks = doctor(None)
    assert_model_checks_pass(report, checks)
    assert report.model == "qwen2.5-coder:0.5b"
    assert checks["tool-call family"].figure.startswith("hermes")


def doctor_cli(model: Path) -> tuple[int, dict[str, Check], str]:
    r = subprocess.run(
        [sys.executable, "-m", "engy_local", "doctor", str(model), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    body = json.loads(r.stdout)
    return r.returncode, {c["name"]: Check(**c) for c in body["checks"]}, r.stderr


def test_doctor_fails_on_a_gguf_without_a_chat_template() -> None:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template=None)
    code, checks, stderr = doctor_cli(path)
    assert code == 1, stderr
    loads = checks["model loads"]
    assert loads.status == "fail" and "has no chat template" in loads.figure, loads
    assert all(checks[n].status == "skip" for n in MODEL_CHECKS[1:]), checks


@pytest.fixture(scope="module")
def refuses_tools() -> Path:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    template = CACHE / "templates" / "refuses-tools.jinja"
    template.parent.mkdir(parents=True, exist_ok=True)
    if not template.is_file() or template.read_text() != REFUSES_TOOLS:
        template.write_text(REFUSES_TOOLS)
    # An absolute template path stands for itself (TEMPLATE_DIR / abs == abs).
    return tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template=str(template))


def test_doctor_fails_on_a_template_that_cannot_render_tools(refuses_tools: Path) -> None:
    report, checks = doctor(str(refuses_tools))
    assert not report.passed
    assert checks["model loads"].status == "pass"
    rendered = checks["template renders tools"]
    assert rendered.status == "fail", rendered
    assert "This model does not support tools." in rendered.figure, rendered
    assert checks["forced tool call"].status == "skip"
    out = io.StringIO()
    from engy_local.commands.doctor import print_report

    print_report(report, False, Console(file=out, width=200))
    assert "failed: template renders tools: the chat template cannot render" in out.getvalue()
