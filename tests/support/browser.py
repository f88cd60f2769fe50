"""A real headless browser for the page's tests: Debian's Chromium driven by
Playwright for Python (never Playwright's own browser downloads). `.ci/run`
installs chromium when it is missing; where none can be had the tests skip
saying so.

Fixtures: `browser` (one Chromium per module) and `open_page` (a
fresh context at a size and colour scheme, closed after the test).
Screenshots go to .engy-test/screenshots/ (git-ignored) for a person to
look at."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.paths import CACHE

SHOTS = CACHE / "screenshots"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SIZES = {"wide": WIDE, "phone": PHONE}


def chromium() -> str | None:
    for candidate in (
        os.environ.get("ENGY_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module: while Playwright's sync API runs, the
    main thread counts as inside an event loop (asyncio.run refuses), so it
    must not outlive the module that uses it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install -e '.[test]')")
    path = chromium()
    if path is None:
        pytest.skip("no Chromium here: .ci/run installs Debian's (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=ARGS)
        yield b
        b.close()


OpenPage = Callable[..., Any]


@pytest.fixture
def open_page(browser: Any) -> Iterator[OpenPage]:
    """open_page(url, size="wide", scheme="light", before=None) -> a Playwright
    Page whose console errors and uncaught exceptions fail the test."""
    contexts: list[Any] = []
    errors: list[str] = []

    def open_(
        url: str,
        size: str = "wide",
        scheme: str = "light",
        before: Callable[[Any], None] | None = None,
        **options: Any,
    ) -> Any:
        context = browser.new_context(viewport=SIZES[size], color_scheme=scheme, **options)
        contexts.append(context)
        page = context.new_page()
        if before is not None:
            before(page)  # routes, scripts: what must be in place before the page loads
        page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
        page.on(
            "console",
            lambda m: (
                errors.append(f"console: {m.text}")
                if m.type == "error" and "401" not in m.text and "403" not in m.text
                else None
            ),
        )
        page.goto(url)
        return page

    yield open_
    for context in contexts:
        context.close()
    assert not errors, errors


def shoot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def live(page: Any) -> None:
    """Wait until the page's event stream is connected."""
    page.wait_for_selector("#link[data-link=live]", state="attached", timeout=15000)


def panel(page: Any, name: str) -> None:
    page.click(f"#tab-{name}")
    page.wait_for_selector(f"#panel-{name}:not([hidden])", timeout=5000)
