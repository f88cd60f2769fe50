"""server/activity.py: the record the page reads. Scripted event streams go
through the real `Tracked` wrapper; what the record says is checked state
by state. (The page on a real `engy serve` is tests/server/test_page.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engy_local.chat import (
    ChatRequest,
    Event,
    Finished,
    Message,
    PromptProgress,
    Started,
    Text,
    TextDelta,
    ToolSpec,
    Usage,
)
from engy_local.errors import GenerationTimeout
from engy_local.server.activity import Activity, Entry
from engy_local.server.metrics import Metrics, Tracked
from engy_local.server.shutdown import Drain

SESSION = "d346981d-9db4-4d3d-8a26-134f6bfb6d44"
CLAUDE = {"user-agent": "claude-cli/2.1.332 (external, cli)"}


class Scripted:
    """A generation that yields `events`, pausing at each None (so the
    test can look at the record between events), then raises `error`."""

    def __init__(self, events: list[Event | None], error: Exception | None = None) -> None:
        self.events, self.error = events, error
        self.prompt_tokens = 10
        self.gate = asyncio.Event()

    def cancel(self) -> None:
        pass

    async def __aiter__(self) -> AsyncIterator[Event]:
        for event in self.events:
            if event is None:
                await self.gate.wait()
                self.gate.clear()
            else:
                yield event
        if self.error is not None:
            raise self.error


def body(system: str, messages: list[str], tools: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": "m",
        "system": [{"type": "text", "text": system}],
        "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(messages)
        ],
        "metadata": {"user_id": json.dumps({"device_id": "x", "session_id": SESSION})},
    }
    if tools:
        out["tools"] = [{"name": "Bash", "input_schema": {"type": "object"}}]
    return out


def chat_of(b: dict[str, Any]) -> ChatRequest:
    messages = [Message("system", (Text(b["system"][0]["text"]),))]
    messages += [Message(m["role"], (Text(m["content"]),)) for m in b["messages"]]
    tools = (ToolSpec("Bash", "", {}),) if "tools" in b else ()
    return ChatRequest("m", tuple(messages), tools=tools)


def begin(activity: Activity, b: dict[str, Any]) -> Entry:
    return activity.begin("anthropic", "/v1/messages", CLAUDE, b, chat_of(b))


async def run(entry: Entry, generation: Scripted) -> list[Event]:
    tracked = Tracked(generation, Metrics(), Drain(), entry)
    return [event async for event in tracked]


def finished(prompt: int, cached: int, out: int = 3) -> Finished:
    return Finished("end", Usage(prompt, cached, out))


def test_a_request_goes_from_queued_to_done() -> None:
    async def main() -> None:
        activity = Activity()
        entry = begin(activity, body("sys", ["hello"]))
        assert entry.to_json(True)["state"] == "queued"
        script = Scripted(
            [
                None,
                Started(100, 20),
                PromptProgress(60, 100),
                None,
                TextDelta("Hi"),
                None,
                TextDelta(" there"),
                finished(100, 20, 2),
            ]
        )
        task = asyncio.create_task(run(entry, script))
        seen = []
        since = 0
        for _ in range(3):
            await asyncio.sleep(0.01)
            update, since = activity.updates(since, reveal=True)
            assert update is not None  # a running request is in every update
            row = update["requests"][0]
            seen.append((row["state"], row["read"], row["output_tokens"]))
            script.gate.set()
        await task
        update, _ = activity.updates(since, reveal=True)
        assert update is not None
        done = update["requests"][0]
        assert seen == [("queued", 0, 0), ("reading", 60, 0), ("generating", 100, 1)]
        assert (done["state"], done["stop"], done["output_tokens"]) == ("done", "end", 2)
        assert (done["prompt_tokens"], done["cached_tokens"], done["read"]) == (100, 20, 100)
        assert done["ttft"] is not None and done["answer"] == "Hi there"
        assert done["preview"] == "hello"
        assert "figures" in update and update["figures"][0]["requests"] == 1
        assert activity.updates(activity.clock, reveal=True) == (None, activity.clock)

    asyncio.run(main())


def test_prompt_text_goes_only_where_it_may() -> None:
    activity = Activity()
    begin(activity, body("sys", ["the secret plan"]))
    hidden = json.dumps(activity.snapshot(reveal=False))
    assert "secret" not in hidden
    assert "secret" in json.dumps(activity.snapshot(reveal=True))


@pytest.mark.parametrize(
    ("error", "state"),
    [(GenerationTimeout("too slow"), "failed"), (asyncio.CancelledError(), "stopped")],
)
def test_a_request_that_ends_badly(error: BaseException, state: str) -> None:
    async def main() -> None:
        activity = Activity()
        entry = begin(activity, body("sys", ["hello"]))
        script = Scripted([Started(10, 0), TextDelta("a")], error)  # type: ignore[arg-type]
        with pytest.raises(type(error)):
            await run(entry, script)
        row = entry.to_json(True)
        assert row["state"] == state
        assert ("too slow" in row["error"]) == (state == "failed")
        assert entry not in activity.live

    asyncio.run(main())


def test_a_consumer_that_goes_away_stops_the_request() -> None:
    async def main() -> None:
        activity = Activity()
        entry = begin(activity, body("sys", ["hello"]))
        tracked = Tracked(
            Scripted([Started(10, 0), TextDelta("a"), TextDelta("b")]), Metrics(), Drain(), entry
        )
        stream = tracked.__aiter__()
        await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        assert entry.state == "stopped" and entry not in activity.live

    asyncio.run(main())


def test_claude_code_turns_make_one_session() -> None:
    async def main() -> None:
        activity = Activity()
        main1 = body("You are Claude Code.", ["list files"])
        entries = []
        entries.append(begin(activity, main1))
        await run(entries[-1], Scripted([Started(700, 0), TextDelta("ok"), finished(700, 0)]))
        title = body(
            "You are naming a coding session: write a title.", ["conversation"], tools=False
        )
        entries.append(begin(activity, title))
        await run(
            entries[-1],
            Scripted([Started(40, 5), TextDelta('{"title": "Listing files"}'), finished(40, 5)]),
        )
        main2 = body("You are Claude Code.", ["list files", "ok", "hidden ones?"])
        entries.append(begin(activity, main2))
        await run(entries[-1], Scripted([Started(720, 703), TextDelta("ok"), finished(720, 703)]))
        main3 = body(
            "You are Claude Code, changed.", ["list files", "ok", "hidden ones?", "ok", "thanks"]
        )
        entries.append(begin(activity, main3))
        await run(
            entries[-1],
            Scripted([Started(740, 4, "token 4 of 740, in system[0]"), finished(740, 4)]),
        )

        [session] = activity.snapshot(reveal=True)["sessions"]
        assert (session["id"], session["source"], session["title"]) == (
            SESSION,
            "metadata.user_id",
            "Listing files",
        )
        lanes = {lane["kind"]: lane for lane in session["lanes"]}
        assert set(lanes) == {"main", "title"}
        turns = lanes["main"]["entries"]
        assert [t["verdict"] for t in turns] == ["first", "cached", "missed"]
        assert [t["changed"] for t in turns] == ["", "", "system[0] changed"]
        assert turns[2]["miss"] == "token 4 of 740, in system[0]"
        assert activity.snapshot(reveal=False)["sessions"][0]["title"] == ""

    asyncio.run(main())


def test_chat_completions_turns_make_one_session_with_their_figures() -> None:
    def completion(system: str, turns: list[str]) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}]
        messages += [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(turns)
        ]
        return {"model": "m", "messages": messages, "prompt_cache_key": "chat-1"}

    def chat(b: dict[str, Any]) -> ChatRequest:
        return ChatRequest(
            "m", tuple(Message(m["role"], (Text(m["content"]),)) for m in b["messages"])
        )

    async def main() -> None:
        activity = Activity()
        sdk = {"user-agent": "OpenAI/Python 1.60.0"}
        for b, script in (
            (completion("be brief", ["hi"]), [Started(50, 0), TextDelta("yo"), finished(50, 0)]),
            (
                completion("be brief", ["hi", "yo", "more"]),
                [Started(60, 52), TextDelta("ok"), finished(60, 52)],
            ),
            (
                completion("be long", ["hi", "yo", "more", "ok", "and?"]),
                [Started(70, 3, "token 3 of 70, in system[0]"), finished(70, 3)],
            ),
        ):
            entry = activity.begin("chat", "/v1/chat/completions", sdk, b, chat(b))
            await run(entry, Scripted(script))  # type: ignore[arg-type]

        snapshot = activity.snapshot(reveal=True)
        rows = snapshot["requests"]
        assert [r["endpoint"] for r in rows] == ["/v1/chat/completions"] * 3
        assert [(r["prompt_tokens"], r["cached_tokens"], r["state"]) for r in rows] == [
            (50, 0, "done"),
            (60, 52, "done"),
            (70, 3, "done"),
        ]
        assert rows[0]["client"] == "OpenAI SDK (Python 1.60.0)" and rows[1]["answer"] == "ok"
        assert (rows[2]["verdict"], rows[2]["prev_prompt"]) == ("missed", 60)
        [session] = snapshot["sessions"]
        assert (session["key"], session["source"]) == (
            "prompt_cache_key:chat-1",
            "prompt_cache_key",
        )
        [lane] = session["lanes"]
        assert [t["verdict"] for t in lane["entries"]] == ["first", "cached", "missed"]
        assert lane["entries"][2]["changed"] == "messages[0] (system) changed"
        assert lane["entries"][2]["miss"] == "token 3 of 70, in system[0]"
        assert snapshot["figures"][0]["requests"] == 3

    asyncio.run(main())


def test_requests_without_a_session_id_are_grouped_by_their_opening() -> None:
    activity = Activity()
    plain = {"user-agent": "Anthropic/Python 0.40.0"}
    for messages in (["a"], ["a", "b", "c"], ["other"]):
        b = body("sys", messages)
        del b["metadata"]
        activity.begin("anthropic", "/v1/messages", plain, b, chat_of(b))
    sessions = activity.snapshot(reveal=True)["sessions"]
    assert sorted(sum(lane["turns"] for lane in s["lanes"]) for s in sessions) == [1, 2]
    assert all(s["source"] == "prefix" and s["id"] == "" for s in sessions)


def test_the_record_is_bounded() -> None:
    activity = Activity()
    for i in range(700):
        b = body("sys", [f"conversation {i}"])
        b["metadata"] = {"user_id": json.dumps({"session_id": f"s{i}"})}
        begin(activity, b)
    snapshot = activity.snapshot(reveal=True)
    assert len(snapshot["requests"]) == 300 and len(snapshot["sessions"]) == 40
    assert len(activity.live) == 300


class EndsWhenCancelled:
    """A generation whose stream ends, not fails, when the wait for its
    next event is cancelled (as a backend's may, tidying up)."""

    prompt_tokens = 10

    def cancel(self) -> None:
        pass

    async def __aiter__(self) -> AsyncIterator[Event]:
        yield Started(10, 0)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return
        yield TextDelta("never")


def test_a_client_gone_mid_wait_leaves_no_unread_task_error() -> None:
    """The consumer goes away while the next event is awaited; the step
    task then ends with StopAsyncIteration. Seen in a bench's engy log as
    "Task exception was never retrieved ... StopAsyncIteration"."""
    import gc

    async def main() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        tracked = Tracked(EndsWhenCancelled(), Metrics(), Drain())  # type: ignore[arg-type]

        async def consume() -> None:
            async for _ in tracked:
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.01)
        gc.collect()
        await asyncio.sleep(0.01)
        return reported

    reported = asyncio.run(main())
    assert not [c for c in reported if "never retrieved" in str(c.get("message"))], reported
