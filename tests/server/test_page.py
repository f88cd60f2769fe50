"""The page (`GET /` on `engy serve`), in a real headless Chromium, against
real `engy serve` processes on a tiny model and on gemma. Every check is of
what the page shows. Screenshots of each panel, at 1280x800 and 390x844, in
light and dark, go to .engy-test/screenshots/."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from support.browser import SHOTS, OpenPage, live, panel, shoot
from support.hubserver import Hub
from support.images import RED, png
from support.paths import FIXTURES
from support.server import EngyServer

GEMMA = "gemma-3-270m-base"
SESSION = "d346981d-9db4-4d3d-8a26-134f6bfb6d44"
CLAUDE_HEADERS = {
    "user-agent": "claude-cli/2.1.332 (external, cli)",
    "x-claude-code-session-id": SESSION,
    "anthropic-version": "2023-06-01",
    "x-app": "cli",
}
BILLING = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.0b8;"}
IDENTITY = {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}
MAIN = {
    "type": "text",
    "text": "You help with software. " * 120,
    "cache_control": {"type": "ephemeral"},
}
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
http = httpx.Client(timeout=180)


# ---- servers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_answer: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngyServer]:
    """The tiny answer model by path, with a store of its own."""
    server = EngyServer(
        str(tiny_answer), "--ctx-size", "16384", home=tmp_path_factory.mktemp("home")
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keyed(tiny_answer: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_answer), "--ctx-size", "4096", "--api-key", "sekrit-key")
    yield server
    server.stop()


def model_of(server: EngyServer) -> str:
    return str(http.get(server.url + "/v1/models").json()["data"][0]["id"])


def claude_turn(
    server: EngyServer,
    system: list[dict[str, Any]],
    messages: list[Any],
    tools: bool = True,
    session: str = SESSION,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model_of(server),
        "max_tokens": 16,
        "system": system,
        "messages": messages,
        "metadata": {
            "user_id": json.dumps({"device_id": "d", "account_uuid": "", "session_id": session})
        },
    }
    if tools:
        body["tools"] = TOOLS
    r = http.post(
        server.url + "/v1/messages",
        json=body,
        headers={**CLAUDE_HEADERS, "x-claude-code-session-id": session, "x-api-key": "x"},
    )
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def text_of(answer: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in answer["content"] if b["type"] == "text")


def claude_session(
    server: EngyServer, session: str = SESSION, changed_to: str = "You help with hardware. "
) -> list[dict[str, Any]]:
    """A Claude Code-shaped session: a main turn, the title side request, the
    second main turn, and a third whose system prompt changed (to
    `changed_to`, repeated)."""
    u1 = {"role": "user", "content": [{"type": "text", "text": "List the files here."}]}
    first = claude_turn(server, [BILLING, IDENTITY, MAIN], [u1], session=session)
    title = claude_turn(
        server,
        [
            BILLING,
            {
                "type": "text",
                "text": IDENTITY["text"] + " You are naming a coding session: write its title.",
            },
        ],
        [{"role": "user", "content": "The conversation: List the files here."}],
        tools=False,
        session=session,
    )
    m2 = [
        u1,
        {"role": "assistant", "content": text_of(first)},
        {"role": "user", "content": "And the hidden ones?"},
    ]
    second = claude_turn(server, [BILLING, IDENTITY, MAIN], m2, session=session)
    changed = {"type": "text", "text": changed_to * 120}
    m3 = [
        *m2,
        {"role": "assistant", "content": text_of(second)},
        {"role": "user", "content": "Thanks."},
    ]
    third = claude_turn(server, [BILLING, IDENTITY, changed], m3, session=session)
    return [first, title, second, third]


# ---- the page and what guards it ------------------------------------------------------


def test_the_page_is_served_with_a_policy_of_its_own_origin(tiny: EngyServer) -> None:
    page = http.get(tiny.url + "/", headers={"accept": "text/html"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert (
        "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    )
    assert "frame-ancestors 'none'" in csp and page.headers["x-content-type-options"] == "nosniff"
    # Every script and stylesheet is the package's own; nothing from elsewhere.
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
    assert "<script>" not in page.text and "style=" not in page.text
    for name, kind in (
        ("page.js", "text/javascript"),
        ("page.css", "text/css"),
        ("chat.js", "text/javascript"),
    ):
        asset = http.get(f"{tiny.url}/engy/page/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert "content-security-policy" in asset.headers
        assert "https://" not in asset.text and "http://" not in asset.text
    assert http.get(tiny.url + "/engy/page/..%2fapp.py").status_code == 404
    assert http.get(tiny.url + "/engy/page/nothing.js").status_code == 404
    # Clients that probe / still get the JSON hello.
    assert http.get(tiny.url + "/").json()["name"] == "engy"


@pytest.mark.parametrize("path", ["/engy/status", "/engy/events", "/engy/models", "/"])
def test_foreign_origins_and_hosts_are_refused(tiny: EngyServer, path: str) -> None:
    for headers in ({"origin": "https://evil.example"}, {"host": "evil.localhost"}):
        r = http.get(tiny.url + path, headers={"accept": "text/html", **headers})
        assert r.status_code == 403, (path, headers)
        assert "access-control-allow-origin" not in r.headers
    for action in ("load", "unload", "pull", "rm"):
        r = http.post(
            f"{tiny.url}/engy/models/{action}",
            content='{"model":"x","ref":"x"}',
            headers={"origin": "https://evil.example", "content-type": "text/plain"},
        )
        assert r.status_code == 403
        # Not even a page of our own origin may act with a form's content type.
        r = http.post(
            f"{tiny.url}/engy/models/{action}",
            content='{"model":"x","ref":"x"}',
            headers={"content-type": "text/plain"},
        )
        assert r.status_code == 400


def test_with_a_key_the_page_shows_nothing_until_it_is_given(
    keyed: EngyServer, open_page: OpenPage, browser: Any
) -> None:
    secret = "PINEAPPLE-SECRET-4242"
    r = http.post(
        keyed.url + "/v1/messages",
        json={
            "model": model_of_keyed(keyed),
            "max_tokens": 8,
            "messages": [{"role": "user", "content": secret}],
        },
        headers={"x-api-key": "sekrit-key"},
    )
    assert r.status_code == 200
    for path in ("/engy/status", "/engy/events", "/engy/models", "/engy/ps", "/metrics"):
        assert http.get(keyed.url + path).status_code == 401, path

    page = open_page(keyed.url + "/")
    page.wait_for_selector("#key-dialog[open]")
    assert page.inner_text("#link") == "key needed"
    shoot(page, "key-wide-light")
    assert secret not in page.content()
    assert page.locator("#requests-body tr").count() == 0
    # What the page's own scripts can fetch without the key: refusals.
    fetched = page.evaluate(
        """async () => Promise.all(["/engy/status", "/engy/events", "/engy/models"].map(
            async (p) => { const r = await fetch(p); return [r.status, await r.text()]; }))"""
    )
    assert [status for status, _ in fetched] == [401, 401, 401]
    assert not any(secret in text for _, text in fetched)

    page.fill("#key-input", "wrong")
    page.click("#key-save")
    page.wait_for_selector("#key-wrong:not([hidden])")
    assert secret not in page.content()

    page.fill("#key-input", "sekrit-key")
    page.click("#key-save")
    live(page)
    row = page.locator("#requests-body tr.req").first
    row.wait_for()
    row.click()
    page.wait_for_selector("tr.detail")
    assert secret in page.inner_text("tr.detail")

    # A page of another origin can read none of it, key or no key.
    evil = browser.new_context()
    try:
        theirs = evil.new_page()
        theirs.route(
            "http://evil.test/**",
            lambda route: route.fulfill(
                status=200, content_type="text/html", body="<title>evil</title>"
            ),
        )
        theirs.goto("http://evil.test/")
        outcome = theirs.evaluate(
            """async (base) => {
                const out = {};
                for (const name of ["status", "events", "models"]) {
                    try {
                        const headers = { "x-api-key": "sekrit-key" };
                        const r = await fetch(`${base}/engy/${name}`, { headers });
                        out[name] = "read " + r.status + " " + (await r.text()).slice(0, 40);
                    } catch (e) { out[name] = "blocked"; }
                }
                return out;
            }""",
            keyed.url,
        )
    finally:
        evil.close()
    assert outcome == {"status": "blocked", "events": "blocked", "models": "blocked"}
    r = http.get(
        keyed.url + "/engy/status",
        headers={"origin": "http://evil.test", "x-api-key": "sekrit-key"},
    )
    assert r.status_code == 403 and secret not in r.text


def model_of_keyed(server: EngyServer) -> str:
    r = http.get(server.url + "/v1/models", headers={"x-api-key": "sekrit-key"})
    return str(r.json()["data"][0]["id"])


def test_open_waits_for_the_server_then_opens_the_page(
    tiny: EngyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import webbrowser

    from engy_local.server.page import open_when_ready, page_url

    opened = threading.Event()
    seen: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: seen.append(url) or opened.set())
    open_when_ready(tiny.url)
    assert opened.wait(30) and seen == [tiny.url + "/"]
    assert page_url("0.0.0.0", 8642) == "http://127.0.0.1:8642"
    assert page_url("::1", 8642) == "http://[::1]:8642"
    assert page_url("localhost", 1) == "http://localhost:1"


def test_an_open_page_does_not_hold_up_a_shutdown(tiny_qwen3: Path, open_page: OpenPage) -> None:
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "2048", "--shutdown-grace", "5")
    try:
        page = open_page(server.url + "/")
        live(page)
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 15, server.output()
        page.wait_for_selector("#link[data-link=offline]", state="attached", timeout=10000)
    finally:
        server.stop()


# ---- sessions, by what the page shows ------------------------------------------------------


def test_claude_code_requests_make_one_session_and_a_changed_system_prompt_says_where(
    tiny: EngyServer, open_page: OpenPage
) -> None:
    page = open_page(tiny.url + "/#sessions")
    live(page)
    first, title, second, _ = claude_session(tiny)
    assert second["usage"]["cache_read_input_tokens"] >= first["usage"]["input_tokens"]

    card = page.locator(f"article.session[data-key='metadata.user_id:{SESSION}']")
    card.wait_for()
    page.wait_for_function(
        "() => document.querySelectorAll(\"section[data-kind='main'] tr.turn\").length === 3"
    )
    # All four requests, the title side request too, are one session.
    assert page.locator("article.session").count() == 1
    assert int(card.locator("section.lane", has_text="main").locator("tr.turn").count()) == 3
    assert SESSION in card.inner_text() and "Claude Code 2.1.332" in card.inner_text()
    # The title side request is part of the session, in a lane of its own,
    # and its answer is the session's title.
    lanes = card.locator("section.lane")
    assert [lanes.nth(i).get_attribute("data-kind") for i in range(lanes.count())] == [
        "main",
        "title",
    ]
    assert card.locator("section[data-kind='title'] tr.turn").count() == 1
    assert card.locator(".session-title").inner_text() == text_of(title).strip()

    turns = card.locator("section[data-kind='main'] tr.turn")
    # A turn shows its state ("queued") until the page hears its verdict.
    page.wait_for_function(
        "() => [...document.querySelectorAll(\"section[data-kind='main'] tr.turn .c-verdict\")]"
        ".every(v => ['first turn', 'from cache', 'missed'].includes(v.textContent.trim()))"
    )
    verdicts = [turns.nth(i).locator(".c-verdict").inner_text() for i in range(3)]
    assert verdicts == ["first turn", "from cache", "missed"]
    cached = second["usage"]["cache_read_input_tokens"]
    assert f"{cached:,}" in turns.nth(1).locator(".c-share").inner_text()
    assert turns.nth(2).locator(".changed").inner_text() == "system[2] changed since turn 2"
    assert turns.nth(1).locator(".c-why").inner_text() == ""
    shoot(page, "sessions-session-wide-light")


def test_a_missed_turn_shows_where_the_engine_says_it_diverged(
    tiny: EngyServer, open_page: OpenPage
) -> None:
    page = open_page(tiny.url + "/#sessions")
    live(page)
    other = "5b0c7e2a-1f3d-4c8e-9a61-2d4f8e0b7c13"
    # A system prompt no earlier test sent: the third turn misses the cache.
    claude_session(tiny, session=other, changed_to="You help with gardens. ")
    card = page.locator(f"article.session[data-key='metadata.user_id:{other}']")
    card.wait_for()
    card.locator("tr.turn[data-verdict='missed']").first.wait_for()
    missed = card.locator("section[data-kind='main'] tr.turn[data-verdict='missed']").last
    assert re.search(
        r"diverged at token \d+ of \d+, in system\[\d\]",
        missed.locator(".c-why").inner_text(timeout=2000),
    )


def test_codex_turns_are_one_session_by_its_prompt_cache_key(tiny: EngyServer) -> None:
    raw = json.loads((FIXTURES / "requests" / "codex-0.171.0-first-turn.json").read_text())
    skip = {"host", "content-length", "authorization", "accept-encoding"}
    headers = {k: v for k, v in raw["headers"] if k.lower() not in skip}
    body = {**raw["body"], "model": model_of(tiny), "stream": False, "max_output_tokens": 16}
    first = http.post(tiny.url + "/v1/responses", json=body, headers=headers)
    assert first.status_code == 200, first.text
    answer = [item for item in first.json()["output"] if item["type"] == "message"]
    again = {**body, "input": [*body["input"], *answer, {"role": "user", "content": "and now?"}]}
    second = http.post(tiny.url + "/v1/responses", json=again, headers=headers)
    assert second.status_code == 200, second.text

    key = raw["body"]["prompt_cache_key"]
    status = http.get(tiny.url + "/engy/status").json()
    [session] = [s for s in status["sessions"] if s["key"] == f"prompt_cache_key:{key}"]
    assert session["client"] == "Codex 0.171.0"
    [lane] = session["lanes"]
    assert (lane["kind"], lane["name"], lane["turns"]) == ("main", key, 2)
    assert [t["verdict"] for t in lane["entries"]] == ["first", "cached"]
    cached = second.json()["usage"]["input_tokens_details"]["cached_tokens"]
    assert lane["entries"][1]["cached_tokens"] == cached > 0
    rows = [r for r in status["requests"] if r["session"] == session["key"]]
    assert {r["endpoint"] for r in rows} == {"/v1/responses"}


def test_chat_completions_through_the_openai_sdk_reach_both_tabs(
    tiny: EngyServer, open_page: OpenPage
) -> None:
    page = open_page(tiny.url + "/")
    live(page)
    key = f"chat-{time.time()}"
    # A system prompt no other test sends, long enough that a miss is plain.
    system: Any = {"role": "system", "content": "You answer questions about tides. " * 100}
    u1: Any = {"role": "user", "content": "When is high water?"}
    with openai.OpenAI(base_url=tiny.url + "/v1", api_key="unused", max_retries=0) as client:
        first = client.chat.completions.create(
            model=model_of(tiny),
            messages=[system, u1],
            max_tokens=8,
            extra_body={"prompt_cache_key": key},
        )
        m2: list[Any] = [
            system,
            u1,
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": "And low water?"},
        ]
        chunks = list(
            client.chat.completions.create(
                model=model_of(tiny),
                messages=m2,
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"prompt_cache_key": key},
            )
        )
        changed: Any = {"role": "system", "content": "You answer questions about rivers. " * 100}
        third = client.chat.completions.create(
            model=model_of(tiny),
            messages=[changed, *m2[1:]],
            max_tokens=8,
            extra_body={"prompt_cache_key": key},
        )
    usages = [u for u in (first.usage, chunks[-1].usage, third.usage) if u is not None]
    details = [u.prompt_tokens_details for u in usages]
    cached = [d.cached_tokens or 0 for d in details if d is not None]
    assert len(usages) == len(cached) == 3

    ids = [
        r["id"]
        for r in http.get(tiny.url + "/engy/status").json()["requests"]
        if r["session"] == f"prompt_cache_key:{key}"
    ]
    assert len(ids) == 3
    for rid, usage, read in zip(ids, usages, cached, strict=True):
        row = page.locator(f"#requests-body tr.req[data-id='{rid}']")
        row.wait_for()
        page.wait_for_function(
            "(id) => document.querySelector(`tr.req[data-id='${id}']`).dataset.state === 'done'",
            arg=rid,
        )
        assert row.locator(".c-endpoint").inner_text() == "/v1/chat/completions"
        assert row.locator(".c-client").inner_text().startswith("OpenAI SDK (Python")
        assert row.locator(".c-prompt").inner_text() == f"{usage.prompt_tokens:,}"
        assert row.locator(".c-cached").inner_text().startswith(f"{read:,}")
        assert row.locator(".c-output").inner_text() == f"{usage.completion_tokens:,}"
        assert re.match(r"[\d.]+ (ms|s)$", row.locator(".c-ttft").inner_text())
    assert cached[1] >= usages[0].prompt_tokens
    # The missed turn's details say where its prompt changed and left the cache.
    page.locator(f"#requests-body tr.req[data-id='{ids[2]}']").click()
    detail = page.locator(f"tr.detail[data-for='{ids[2]}']")
    assert "messages[0] (system) changed (since turn 2)" in detail.inner_text()
    assert f"the previous turn had {usages[1].prompt_tokens:,}" in detail.inner_text()
    assert re.search(r"token \d+ of \d+, in system\[0\]", detail.inner_text())
    shoot(page, "requests-chat-completions-wide-light")

    panel(page, "sessions")
    card = page.locator(f"article.session[data-key='prompt_cache_key:{key}']")
    card.wait_for()
    assert "OpenAI SDK" in card.inner_text() and "session id from prompt_cache_key" in (
        card.inner_text()
    )
    turns = card.locator("section[data-kind='main'] tr.turn")
    assert [turns.nth(i).locator(".c-verdict").inner_text() for i in range(3)] == [
        "first turn",
        "from cache",
        "missed",
    ]
    assert turns.nth(2).locator(".changed").inner_text() == (
        "messages[0] (system) changed since turn 2"
    )
    assert re.search(
        r"diverged at token \d+ of \d+, in system\[0\]",
        turns.nth(2).locator(".c-why").inner_text(),
    )
    shoot(page, "sessions-chat-completions-wide-light")


def test_the_keyboard_reaches_every_panel_and_a_request_s_details(
    tiny: EngyServer, open_page: OpenPage
) -> None:
    if not http.get(tiny.url + "/engy/status").json()["requests"]:
        claude_turn(tiny, [IDENTITY], [{"role": "user", "content": "hi"}])
    page = open_page(tiny.url + "/")
    live(page)
    page.focus("#tab-requests")
    for name in ("sessions", "models", "cache", "figures", "chat"):
        page.keyboard.press("ArrowRight")
        assert page.evaluate("() => document.activeElement.id") == f"tab-{name}"
        assert page.is_visible(f"#panel-{name}")
    page.keyboard.press("Home")
    assert page.is_visible("#panel-requests")
    page.locator("#requests-body tr.req").first.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("tr.detail")
    assert page.locator("tr.req").first.get_attribute("aria-expanded") == "true"


# ---- models: load, unload, pull, rm ------------------------------------------------------


@pytest.fixture(scope="module")
def store_server(
    gemma_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngyServer]:
    """`engy serve` with no MODEL on a store of its own: the default model
    and whatever is pulled."""
    server = EngyServer(None, "--ctx-size", "4096", home=tmp_path_factory.mktemp("store"))
    yield server
    server.stop()


def test_a_pull_shows_progress_and_the_model_appears_loads_and_goes(
    store_server: EngyServer, tiny_qwen3: Path, open_page: OpenPage
) -> None:
    hub = Hub().start()
    try:
        hub.add("files/tiny-pulled.gguf", tiny_qwen3.read_bytes())
        hub.delay = 0.02  # per 64 KiB: a few seconds in all
        page = open_page(store_server.url + "/#models")
        live(page)
        page.wait_for_selector("#installed-body tr")
        page.fill("#pull-ref", f"{hub.url}/files/tiny-pulled.gguf")
        page.keyboard.press("Enter")
        job = page.locator(".pull[data-ref$='tiny-pulled.gguf']")
        job.wait_for()
        page.wait_for_function(
            """() => {
                const bar = document.querySelector('.pull .bar');
                const value = bar && Number(bar.getAttribute('aria-valuenow'));
                return value > 0 && value < 100;
            }""",
            timeout=60000,
        )
        progress = job.inner_text()
        assert "tiny-pulled.gguf" in progress and re.search(r"of \d+(\.\d)? MiB", progress)
        shoot(page, "models-pulling-wide-light")
        page.wait_for_selector(".pull[data-state='done']", timeout=120000)
        row = page.locator("#installed-body tr[data-model='tiny-pulled']")
        row.locator("td[data-label='Source']", has_text="url").wait_for()
        assert "served" in row.inner_text() and "MiB" in row.inner_text()

        row.get_by_role("button", name="Load tiny-pulled").click()
        page.wait_for_selector("#loaded-body tr[data-model='tiny-pulled']", timeout=60000)
        page.locator("#loaded-body tr[data-model='tiny-pulled']").get_by_role(
            "button", name="Unload tiny-pulled"
        ).click()
        page.wait_for_selector(
            "#loaded-body tr[data-model='tiny-pulled']", state="detached", timeout=30000
        )

        # rm asks first; Cancel keeps it, Remove deletes it.
        row.get_by_role("button", name="Remove tiny-pulled").click()
        page.wait_for_selector("#confirm-dialog[open]")
        assert "tiny-pulled" in page.inner_text("#confirm-text")
        shoot(page, "models-confirm-wide-light")
        page.click("#confirm-cancel")
        time.sleep(0.5)
        assert row.count() == 1
        row.get_by_role("button", name="Remove tiny-pulled").click()
        page.click("#confirm-ok")
        page.wait_for_selector(
            "#installed-body tr[data-model='tiny-pulled']", state="detached", timeout=30000
        )
        served = [m["id"] for m in http.get(store_server.url + "/v1/models").json()["data"]]
        assert "tiny-pulled" not in served
    finally:
        hub.stop()


def test_a_local_file_pulled_on_a_server_for_one_model_is_listed_not_served(
    tiny: EngyServer, tiny_qwen3: Path, open_page: OpenPage
) -> None:
    page = open_page(tiny.url + "/#models")
    live(page)
    page.fill("#pull-ref", str(tiny_qwen3))
    page.click("#pull-go")
    page.wait_for_selector(".pull[data-state='done']", timeout=60000)
    row = page.locator(f"#installed-body tr[data-model='{tiny_qwen3.stem}']")
    row.wait_for()
    assert "file" in row.inner_text() and "not served" in row.inner_text()
    assert row.get_by_role("button", name=f"Load {tiny_qwen3.stem}").is_disabled()
    # The model this server was given by path can be unloaded and loaded again.
    served = model_of(tiny)
    loaded = page.locator(f"#loaded-body tr[data-model='{served}']")
    loaded.get_by_role("button", name=f"Unload {served}").click()
    page.wait_for_selector(
        f"#loaded-body tr[data-model='{served}']", state="detached", timeout=30000
    )
    page.locator(f"#installed-body tr[data-model='{served}']").get_by_role(
        "button", name=f"Load {served}"
    ).click()
    page.wait_for_selector(f"#loaded-body tr[data-model='{served}']", timeout=60000)


# ---- gemma: the live table and the chat -----------------------------------------------------

RECORD_STATES = """(client) => {
    // Rows the table holds already (earlier tests' requests) are not watched.
    const rows = document.querySelectorAll('#requests-body tr.req');
    const before = new Set([...rows].map((tr) => tr.dataset.id));
    window.__seen = [];
    const look = () => {
        for (const tr of document.querySelectorAll('#requests-body tr.req')) {
            if (before.has(tr.dataset.id)) continue;
            if (!tr.querySelector('.c-client').textContent.startsWith(client)) continue;
            const cell = tr.querySelector('.c-state');
            const badge = cell.querySelector('.badge').textContent;
            const seen = [tr.dataset.id, badge, cell.querySelector('.sub').textContent];
            const last = window.__seen[window.__seen.length - 1];
            if (!last || last.join() !== seen.join()) window.__seen.push(seen);
        }
    };
    const all = { subtree: true, childList: true, characterData: true, attributes: true };
    new MutationObserver(look).observe(document.getElementById('requests-body'), all);
}"""


def test_an_sdk_generation_goes_through_the_live_table(
    gemma_server: EngyServer, open_page: OpenPage
) -> None:
    page = open_page(gemma_server.url + "/")
    live(page)
    page.evaluate(RECORD_STATES, "Anthropic SDK")
    # A prompt no earlier test sent (nothing of it cached) and long enough
    # to be read in several chunks.
    words = " ".join(f"item{i} is {i * 7 % 13}" for i in range(250))
    prompt = f"[{time.time()}] Here is a list: {words}. Which item is first?"
    done: dict[str, Any] = {}

    def generate() -> None:
        with (
            anthropic.Anthropic(
                base_url=gemma_server.url, api_key="unused", max_retries=0
            ) as client,
            client.messages.stream(
                model=GEMMA, max_tokens=48, messages=[{"role": "user", "content": prompt}]
            ) as stream,
        ):
            for _ in stream.text_stream:
                pass
            done["message"] = stream.get_final_message()

    worker = threading.Thread(target=generate)
    worker.start()
    try:
        page.wait_for_function("() => window.__seen.some((s) => s[1] === 'reading')", timeout=60000)
        shoot(page, "requests-reading-wide-light")
        page.wait_for_function(
            "() => window.__seen.some((s) => s[1] === 'generating')", timeout=120000
        )
        shoot(page, "requests-generating-wide-light")
    finally:
        worker.join(timeout=180)
    usage = done["message"].usage
    page.wait_for_function("() => window.__seen.some((s) => s[1] === 'done')", timeout=10000)
    seen = page.evaluate("() => window.__seen")
    assert len({s[0] for s in seen}) == 1, seen  # one row, the SDK's
    states = [s[1] for s in seen]
    order = [states.index(s) for s in ("reading", "generating", "done")]
    assert order == sorted(order), states
    reading = [s[2] for s in seen if s[1] == "reading"]
    # Read in chunks of 512 tokens: the page showed it part-way, with an ETA.
    assert any(re.match(r"[1-9]\d?% of [\d,]+ · ETA \d.*$", r) for r in reading), reading
    assert any(re.search(r"\d+(\.\d)? tok/s", s[2]) for s in seen if s[1] == "generating"), seen

    row = page.locator(f"#requests-body tr.req[data-id='{seen[0][0]}']")
    prompt_tokens = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert row.locator(".c-prompt").inner_text() == f"{prompt_tokens:,}"
    assert (
        row.locator(".c-cached").inner_text().startswith(f"{usage.cache_read_input_tokens or 0:,}")
    )
    assert row.locator(".c-output").inner_text() == f"{usage.output_tokens:,}"
    assert row.locator(".c-client").inner_text().startswith("Anthropic SDK (Python")
    assert row.locator(".c-endpoint").inner_text() == "/v1/messages"
    assert re.match(r"[\d.]+ (ms|s)$", row.locator(".c-ttft").inner_text())
    stop = {"end_turn": "end of turn", "max_tokens": "token limit"}[done["message"].stop_reason]
    assert row.locator(".c-state .sub").inner_text().startswith(stop)


STATS = re.compile(
    r"^((stopped|cut at the token limit) · )?\d+ tokens( · [\d.]+ tok/s)?"
    r" · first token [\d.]+ s · context [\d,]+/[\d,]+ \(\d+%\)$"
)


def test_the_chat_streams_an_answer_and_stop_stops(
    gemma_server: EngyServer, open_page: OpenPage
) -> None:
    page = open_page(gemma_server.url + "/#chat")
    live(page)
    page.wait_for_function("() => document.querySelector('#chat-model').value !== ''")
    page.fill("#chat-max", "24")  # gemma-3-270m may ramble on; a busy machine is slow
    page.fill("#chat-input", "Write one short sentence about the sea.")
    page.keyboard.press("Enter")
    answer = page.locator(".msg.assistant").last
    page.wait_for_selector(".msg.assistant[data-state='done']", timeout=120000)
    assert answer.locator(".answer").inner_text().strip()
    stats = answer.locator(".stats").inner_text()
    assert STATS.match(stats), stats

    page.fill("#chat-max", "1024")
    page.fill(
        "#chat-input",
        "Tell me a very long story about a lighthouse keeper and her cat, in many chapters.",
    )
    page.click("#chat-send")
    page.wait_for_function(
        "() => document.querySelector('.msg.assistant:last-child .answer').textContent.length > 20",
        timeout=120000,
    )
    assert page.is_enabled("#chat-stop")
    page.click("#chat-stop")
    page.wait_for_selector(".msg.assistant[data-state='stopped']", timeout=10000)
    stopped = page.locator(".msg.assistant").last.locator(".stats").inner_text()
    assert stopped.startswith("stopped · ") and STATS.match(stopped), stopped
    assert page.is_disabled("#chat-stop") and page.is_enabled("#chat-send")
    shoot(page, "chat-stopped-wide-light")
    # The server saw the page's request end, stopped, in its live table
    # (beside whatever other tests on this server stopped).
    panel(page, "requests")
    client = page.locator(".c-client", has_text=re.compile(r"^engy page$"))
    row = page.locator("#requests-body tr.req[data-state='stopped']").filter(has=client)
    row.first.wait_for(timeout=15000)


def test_the_cache_panel_shows_each_tier_the_engine_reports(
    tiny: EngyServer, open_page: OpenPage
) -> None:
    # Five long conversations on a model of four sequences: the fifth takes
    # a sequence, whose conversation goes to the RAM cache.
    for i in range(5):
        words = " ".join(f"entry {i}.{k} holds {k * 7 % 13}" for k in range(120))
        body = {
            "model": model_of(tiny),
            "max_tokens": 2,
            "messages": [{"role": "user", "content": words}],
        }
        assert http.post(tiny.url + "/v1/messages", json=body).status_code == 200
    status = http.get(tiny.url + "/engy/status").json()
    model = next(m for m in status["loaded"] if m["id"] == model_of(tiny))
    tiers = {c["tier"]: c for c in model["caches"]}
    assert set(tiers) == {"ram", "disk"} and tiers["ram"]["entries"] >= 1

    page = open_page(tiny.url + "/#cache")
    rows = page.locator("#cache-list tr[data-tier]")
    rows.first.wait_for()
    page.wait_for_function(
        "() => document.querySelectorAll('#cache-list tr[data-tier]').length >= 2"
    )
    shown = {
        rows.nth(i).get_attribute("data-tier"): rows.nth(i).inner_text()
        for i in range(rows.count())
    }
    assert "RAM" in shown["ram"] and "disk" in shown["disk"]
    ram = [c.strip() for c in shown["ram"].split("\t")]
    assert str(tiers["ram"]["entries"]) == ram[1], shown["ram"]
    assert "of 2 GiB" in shown["ram"]  # the --cache-ram budget
    shoot(page, "cache-tiers-wide-light")


def test_the_chat_attaches_an_image_where_the_model_has_a_projector(
    tiny_vision: tuple[Path, Path], tmp_path: Path, open_page: OpenPage
) -> None:
    model, projector = tiny_vision
    red = tmp_path / "red.png"
    red.write_bytes(png(RED))
    server = EngyServer(str(model), "--mmproj", str(projector), "--ctx-size", "2048")
    try:
        page = open_page(server.url + "/#chat")
        live(page)
        page.wait_for_selector("#chat-attach:not([hidden])")
        page.set_input_files("#chat-file", str(red))
        page.wait_for_selector("#chat-attached img")
        page.fill("#chat-input", "What colour is this?")
        page.keyboard.press("Enter")
        page.wait_for_selector(".msg.assistant[data-state='done']", timeout=60000)
        assert page.locator(".msg.user img").count() == 1
        assert "red" in page.locator(".msg.assistant .answer").inner_text()
        shoot(page, "chat-image-wide-light")
    finally:
        server.stop()


# ---- screenshots: each panel, both sizes, light and dark -------------------------------


@pytest.mark.parametrize("size", ["wide", "phone"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_of_every_panel(
    tiny: EngyServer, open_page: OpenPage, size: str, scheme: str
) -> None:
    if not http.get(tiny.url + "/engy/status").json()["sessions"]:
        claude_session(tiny)
    page = open_page(tiny.url + "/", size=size, scheme=scheme)
    live(page)
    width = page.viewport_size["width"]
    for name in ("requests", "sessions", "models", "cache", "figures", "chat"):
        panel(page, name)
        page.wait_for_timeout(400)
        # Nothing spills sideways out of the page at either size.
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width, name
        path = shoot(page, f"{name}-{size}-{scheme}")
        assert path.stat().st_size > 5000
    assert SHOTS.is_dir()
