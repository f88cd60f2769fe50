"""`engy chat`: the client side of both protocols (round trips through the
server's own translation), the conversation file, the answer view, and the
real `engy chat` driven in a terminal against tiny models, in-process and
through `engy serve`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.images import RED, b64, png
from support.paths import ANSWER, CACHE
from support.server import EngyServer
from support.terminal import INPUT_OFF, INPUT_ON, WAIT, Terminal, clean

from engy_local.chat import (
    ChatRequest,
    Event,
    Finished,
    Heartbeat,
    Image,
    Message,
    PromptProgress,
    Sampling,
    Started,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    ToolSpec,
    Usage,
)
from engy_local.commands.repl.conversation import Conversation, from_json
from engy_local.commands.repl.reader import open_block, unquote
from engy_local.commands.repl.view import AnswerView, BlockSplitter, Stats, stats_line
from engy_local.errors import ConversationFileError, InvalidRequest, PromptTooLong, RemoteError
from engy_local.protocols import anthropic, client_anthropic, client_responses, responses
from engy_local.protocols.anthropic_stream import MessageStream

# ---- neutral request -> wire JSON -> the server's parser: the same request ----

WEATHER = ToolSpec(
    "weather", "The weather in a city", {"type": "object", "properties": {"city": {}}}
)


def user(text: str) -> Message:
    return Message("user", (Text(text),))


def chat_request(*messages: Message, **fields: Any) -> ChatRequest:
    fields.setdefault("sampling", Sampling(max_tokens=100))
    return ChatRequest(model="m", messages=messages, **fields)


TOOL_TURNS = (
    user("weather in Paris?"),
    Message(
        "assistant", (Text("Let me look."), ToolCall("call_1", "weather", '{"city": "Paris"}'))
    ),
    Message("tool", (ToolResult("call_1", "sunny"),)),
    user("thanks"),
)

ROUND_TRIPS: list[tuple[str, ChatRequest]] = [
    ("one question", chat_request(user("hi"))),
    (
        "system prompt and turns",
        chat_request(
            Message("system", (Text("Be brief."),)),
            user("a"),
            Message("assistant", (Text("b"),)),
            user("c"),
        ),
    ),
    (
        "sampling",
        chat_request(user("hi"), sampling=Sampling(max_tokens=7, temperature=0.5, top_p=0.9)),
    ),
    ("tools and a replayed call", chat_request(*TOOL_TURNS, tools=(WEATHER,))),
    (
        "a forced tool, one call at a time",
        chat_request(
            user("go"), tools=(WEATHER,), tool_choice=ToolChoice("tool", "weather", parallel=False)
        ),
    ),
]

# Only the Messages API carries these.
MESSAGES_ONLY: list[tuple[str, ChatRequest]] = [
    ("thinking on", chat_request(user("hi"), thinking=True)),
    ("thinking off", chat_request(user("hi"), thinking=False)),
    ("top_k and stop", chat_request(user("hi"), sampling=Sampling(9, top_k=5, stop=("END",)))),
    (
        "an image, and thinking replayed",
        chat_request(
            Message("user", (Text("what is it?"), Image("image/png", b64(png(RED))))),
            Message("assistant", (Thinking("hmm"), Text("a dot"))),
            user("sure?"),
        ),
    ),
]


@pytest.mark.parametrize(("name", "chat"), ROUND_TRIPS + MESSAGES_ONLY)
def test_messages_request_round_trips_through_the_server_parser(
    name: str, chat: ChatRequest
) -> None:
    body = client_anthropic.request_json(chat)
    assert body["stream"] is True
    parsed = anthropic.parse_request(json.loads(json.dumps(body)))
    assert parsed.stream
    assert parsed.chat == chat


@pytest.mark.parametrize(("name", "chat"), ROUND_TRIPS)
def test_responses_request_round_trips_through_the_server_parser(
    name: str, chat: ChatRequest
) -> None:
    body = client_responses.request_json(chat)
    assert body["stream"] is True and body["store"] is False
    parsed = responses.parse_request(json.loads(json.dumps(body)))
    # Responses names no overflow: given max_output_tokens, it rejects.
    expected = ChatRequest(**{**chat.__dict__, "overflow": "reject"})
    # A tool result's name is filled in from the call it answers.
    assert parsed.chat == _named_results(expected)


def _named_results(chat: ChatRequest) -> ChatRequest:
    names = {p.id: p.name for m in chat.messages for p in m.parts if isinstance(p, ToolCall)}
    messages = tuple(
        Message(
            m.role,
            tuple(
                ToolResult(p.call_id, p.content, p.is_error, names.get(p.call_id))
                if isinstance(p, ToolResult)
                else p
                for p in m.parts
            ),
        )
        for m in chat.messages
    )
    return ChatRequest(**{**chat.__dict__, "messages": messages})


def test_messages_request_without_max_tokens_asks_for_the_default() -> None:
    body = client_anthropic.request_json(ChatRequest("m", (user("hi"),)))
    assert body["max_tokens"] == client_anthropic.DEFAULT_MAX_TOKENS
    assert "max_output_tokens" not in client_responses.request_json(ChatRequest("m", (user("x"),)))


# ---- neutral events -> the server's stream -> the client's decoder -----------

USAGE = Usage(prompt_tokens=40, cached_tokens=30, output_tokens=9)

EVENTS: list[Event] = [
    Started(40, 30),
    PromptProgress(10, 10),
    ThinkingDelta("let me "),
    ThinkingDelta("see"),
    TextDelta("Hello"),
    TextDelta(" there."),
    ToolCallStart(0, "call_a", "weather"),
    ToolCallDelta(0, '{"city": '),
    ToolCallDelta(0, '"Paris"}'),
    ToolCallEnd(0, '{"city": "Paris"}'),
    ToolCallStart(1, "call_b", "weather"),
    ToolCallEnd(1, "{}"),
    Finished("tool_call", USAGE),
]


def test_messages_stream_round_trip_gives_the_same_events() -> None:
    parsed = anthropic.parse_request({"model": "m", "max_tokens": 9, "messages": [], "tools": []})
    machine = MessageStream(parsed, "msg_1", prompt_tokens=40)
    wire = machine.start() + [e for event in EVENTS for e in machine.process(event)]
    decoder = client_anthropic.MessageDecoder()
    got = [e for data in json.loads(json.dumps(wire)) for e in decoder.feed(data)]
    decoder.close()
    # message_start carries the whole prompt; progress arrives as pings.
    assert got == [Started(40, 0), Heartbeat(), Heartbeat(), *EVENTS[2:]]


def test_responses_stream_round_trip_gives_the_same_events() -> None:
    parsed = responses.parse_request(
        {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "weather"}]}
    )
    machine = responses.ResponseStream(parsed, response_id="resp_1", created_at=1)
    wire = machine.start() + [e for event in EVENTS for e in machine.process(event)]
    decoder = client_responses.ResponseDecoder()
    got = [e for data in json.loads(json.dumps(wire)) for e in decoder.feed(data)]
    decoder.close()
    # Responses streams no thinking and no prompt size; progress is a
    # keepalive; a call's arguments always come as a delta before they end.
    assert got == [
        Heartbeat(),
        Heartbeat(),
        *EVENTS[4:11],
        ToolCallDelta(1, "{}"),
        *EVENTS[11:],
    ]


def test_a_stream_that_stops_early_is_an_error() -> None:
    for decoder in (client_anthropic.MessageDecoder(), client_responses.ResponseDecoder()):
        with pytest.raises(Exception, match="ended before the answer"):
            decoder.close()


def test_errors_in_streams_and_bodies_keep_the_server_message() -> None:
    parsed = anthropic.parse_request({"model": "m", "max_tokens": 9, "messages": []})
    err = PromptTooLong(900, 512)
    (event,) = MessageStream(parsed, "msg_1", 1).fail(err)
    with pytest.raises(RemoteError, match="900 tokens > 512"):
        client_anthropic.MessageDecoder().feed(event)

    machine = responses.ResponseStream(
        responses.parse_request({"model": "m", "input": "x"}), response_id="resp_1", created_at=1
    )
    failed = machine.fail(err)[-1]
    assert failed["type"] == "response.failed"
    with pytest.raises(RemoteError, match="900 tokens > 512") as info:
        client_responses.ResponseDecoder().feed(failed)
    assert info.value.kind == "context_length_exceeded"

    for render in (anthropic.error_body, responses.error_body):
        status, body, _ = render(InvalidRequest("messages: field required"))
        remote = client_anthropic.error_from(status, body)
        assert (remote.status, remote.message) == (400, "messages: field required")
    assert client_anthropic.error_from(502, None).message == "the server answered HTTP 502"


# ---- the conversation file ---------------------------------------------------


def test_conversation_file_round_trip(tmp_path: Path) -> None:
    conv = Conversation(model="m", system="Be brief.")
    conv.messages = [
        user("hi"),
        Message("assistant", (Thinking("hmm"), Text("Hello"))),
        user("again"),
        Message("assistant", (Text("Hi."),)),
    ]
    path = tmp_path / "c.json"
    conv.save(path)
    data = json.loads(path.read_text())
    assert data == {
        "format": "engy-chat/1",
        "model": "m",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello", "thinking": "hmm"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "Hi."},
        ],
    }
    other = Conversation(model="x")
    other.load(path)
    assert (other.system, other.messages, other.model) == (conv.system, conv.messages, "x")
    request = other.request("next")
    assert request.messages[0] == Message("system", (Text("Be brief."),))
    assert request.messages[-1] == user("next")


BAD_FILES: list[tuple[Any, str]] = [
    ([], "holds a JSON object"),
    ({"format": "other/2", "messages": []}, "unknown format 'other/2'"),
    ({"messages": {}}, "messages: expected a list"),
    ({"system": 3, "messages": []}, "system: expected a string"),
    ({"messages": [{"role": "tool", "content": "x"}]}, r"messages\[0\].role: expected user"),
    ({"messages": [{"role": "user", "content": ["x"]}]}, r"messages\[0\].content: expected"),
]


@pytest.mark.parametrize(("data", "message"), BAD_FILES)
def test_bad_conversation_files_say_what_is_wrong(data: Any, message: str) -> None:
    with pytest.raises(ConversationFileError, match=message):
        from_json(data)


def test_unreadable_conversation_files_are_one_clear_error(tmp_path: Path) -> None:
    conv = Conversation(model="m")
    with pytest.raises(ConversationFileError, match="cannot read"):
        conv.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ConversationFileError, match="is not JSON"):
        conv.load(tmp_path / "bad.json")


# ---- the answer view ----------------------------------------------------------

MARKDOWN = (
    "Intro line\nsecond line\n\n"
    "1. one\n\n    indented continuation\n2. two\n\n"
    "```python\nx = 1\n\ny = 2\n```\n\n"
    "~~~\n```\n~~~\n"
    "Last words"
)
BLOCKS = [
    "Intro line\nsecond line",
    "1. one\n\n    indented continuation\n2. two",
    "```python\nx = 1\n\ny = 2\n```",
    "~~~\n```\n~~~\nLast words",
]


def test_block_splitter_gives_the_same_blocks_at_every_split() -> None:
    for cut in range(len(MARKDOWN) + 1):
        for step in (1, 7):
            splitter = BlockSplitter()
            pieces = [MARKDOWN[:cut]] + [
                MARKDOWN[i : i + step] for i in range(cut, len(MARKDOWN), step)
            ]
            blocks = [b for p in pieces for b in splitter.feed(p)]
            blocks.append(splitter.finish())
            assert blocks == BLOCKS, (cut, step)


def test_stats_line() -> None:
    line = stats_line(Stats(11, 0.25, 2.0, 1500, 32768, "end"))
    assert line == "11 tokens · 5.0 tok/s · first token 0.25 s · context 1,500/32,768 (5%)"
    assert stats_line(Stats(3, None, 0.0, 40, 0, "stopped")) == "stopped · 3 tokens · context 40"
    assert stats_line(Stats(8, 0.1, 1.0, 9, 0, "length")).startswith("cut at the token limit")


def render(events: list[Event], show_thinking: bool) -> str:
    console = Console(record=True, width=80, force_terminal=True, color_system="standard")
    view = AnswerView(console, show_thinking=show_thinking, status="waiting")
    for event in events:
        view.event(event)
    view.close()
    return console.export_text(styles=True)


def test_view_shows_thinking_dim_text_rendered_and_tool_calls() -> None:
    events: list[Event] = [
        ThinkingDelta("Pondering."),
        TextDelta("Some **bold** text.\n\n"),
        TextDelta("```\ncode here\n```\n"),
        *EVENTS[6:10],
        Finished("tool_call", USAGE),
    ]
    shown = render(events, show_thinking=True)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "\x1b[2;3mPondering.\x1b[0m" in shown  # dim italic
    assert "Some bold text." in plain and "**" not in plain
    assert "code here" in plain and "```" not in plain
    assert '⚙ weather {"city": "Paris"}' in plain
    hidden = render(events, show_thinking=False)
    assert "Pondering" not in hidden and "Some" in hidden


def test_view_status_tells_the_prompt_progress_and_hidden_thinking() -> None:
    console = Console(file=open(os.devnull, "w"), force_terminal=True, width=80)  # noqa: SIM115
    view = AnswerView(console, show_thinking=False, status="waiting")

    def status() -> str:
        return " ".join(str(p.text) for p in view.live_part() if hasattr(p, "text"))

    assert status() == "waiting"
    view.event(Started(2048, 0))
    view.event(PromptProgress(512, 2048))
    assert status() == "processing the prompt 512/2,048 tokens"
    view.event(ThinkingDelta("a"))
    view.event(ThinkingDelta("b"))
    assert status() == "thinking (2 tokens)"
    view.close()
    console.file.close()


def test_triple_quotes_make_a_multi_line_message() -> None:
    assert open_block('"""first line') and not open_block('"""a\nb"""')
    assert not open_block("plain")
    assert unquote('"""\nline one\nline two\n"""') == "line one\nline two"
    assert unquote("no quotes") == "no quotes"


# ---- the real `engy chat` in a terminal -----------------------------------------


def stats_of(output: str) -> str:
    lines = [line for line in output.splitlines() if "tokens ·" in line]
    assert lines, output
    return lines[-1]


def used_tokens(output: str) -> int:
    found = re.search(r"context: (?:about )?([\d,]+) tokens used", output)
    assert found, output
    return int(found.group(1).replace(",", ""))


def test_chat_in_a_terminal(tiny_answer: Path, tmp_path: Path, terminals: list[Terminal]) -> None:
    term = Terminal(str(tiny_answer), home=tmp_path / "home")
    terminals.append(term)
    assert "engy chat" in term.banner and "context 32,768" in term.banner

    out = term.run("Who are you?")
    assert ANSWER in out
    assert re.search(r"\d+ tokens · [\d.]+ tok/s · first token [\d.]+ s · context ", stats_of(out))

    before = used_tokens(term.run("/tokens"))
    assert "system prompt set" in term.run("/system You answer in one short line.")
    with_system = used_tokens(term.run("/tokens"))
    assert with_system > before

    saved = tmp_path / "talk.json"
    assert "saved 2 messages" in term.run(f"/save {saved}")
    data = json.loads(saved.read_text())
    assert data["system"] == "You answer in one short line."
    assert data["messages"] == [
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": ANSWER},
    ]

    assert "conversation cleared" in term.run("/clear")
    cleared = used_tokens(term.run("/tokens"))
    assert cleared < with_system
    assert "loaded 2 messages" in term.run(f"/load {saved}")
    assert used_tokens(term.run("/tokens")) == with_system

    out = term.run("And again?")
    assert ANSWER in out and "context " in stats_of(out)
    assert "saved 4 messages" in term.run(f"/save {saved}")
    assert len(json.loads(saved.read_text())["messages"]) == 4

    # Errors are one line and the session goes on.
    out = term.run("/model /no/such/model.gguf")
    assert "error: no such file: /no/such/model.gguf" in out
    out = term.run(f"/load {tmp_path / 'missing.json'}")
    assert "error: cannot read" in out
    assert "error: unknown command /nope" in term.run("/nope")
    assert ANSWER in term.run("Still there?")

    assert "/think on|off|default|show|hide" in term.run("/help")
    assert term.leave() == 0


def test_history_is_kept_across_runs(
    tiny_answer: Path, tmp_path: Path, terminals: list[Terminal]
) -> None:
    home = tmp_path / "home"
    first = Terminal(str(tiny_answer), home=home)
    terminals.append(first)
    first.run("remember this line")
    assert first.leave() == 0
    second = Terminal(str(tiny_answer), home=home)
    terminals.append(second)
    second.child.send("\x1b[A")  # the Up arrow
    second.child.expect_exact("remember this line")
    second.child.send("\r")
    second.child.expect_exact(INPUT_OFF)
    assert ANSWER in second.ready()
    assert second.leave() == 0


def test_ctrl_c_stops_an_answer_and_the_session_goes_on(
    tiny_qwen3: Path, tiny_answer: Path, tmp_path: Path, terminals: list[Terminal]
) -> None:
    # This tiny model writes '"' for ever: only Ctrl-C ends its answers. The
    # window is large enough that a loaded machine's Ctrl-C still arrives
    # long before the answer could fill it (4,096 took 17 s here).
    term = Terminal(str(tiny_qwen3), "--ctx-size", "32768", home=tmp_path / "home")
    terminals.append(term)
    for question in ("Tell me a long story.", "Another one?"):
        term.send(question)
        # Streaming, and not done: more quotes than the stopped answer
        # before it left on the screen.
        term.child.expect_exact('"' * 60)
        term.child.sendintr()
        out = clean(term.raw_until_prompt())
        assert stats_of(out).startswith("stopped · ")

    out = term.run(f"/model {tiny_answer}")
    assert f"model {tiny_answer.stem}" in out
    assert ANSWER in term.run("Now a short answer, please.")
    saved = tmp_path / "c.json"
    term.run(f"/save {saved}")
    # The stopped answers stay, as far as they went.
    messages = json.loads(saved.read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert messages[1]["content"].startswith('""""') and messages[5]["content"] == ANSWER
    # Ctrl-C at the prompt clears the line; Ctrl-D leaves.
    term.child.send("half a line")
    term.child.sendintr()
    term.child.expect_exact(INPUT_ON)
    assert term.leave() == 0


def test_a_full_context_is_one_line_and_the_session_goes_on(
    tiny_answer: Path, tmp_path: Path, terminals: list[Terminal]
) -> None:
    term = Terminal(str(tiny_answer), "--ctx-size", "64", home=tmp_path / "home")
    terminals.append(term)
    out = term.run("word " * 300)
    errors = [line for line in out.splitlines() if "error:" in line]
    assert len(errors) == 1 and re.search(
        r"prompt is too long: \d+ tokens > \d+ maximum", errors[0]
    )
    assert ANSWER in term.run("Short one?")
    assert term.leave() == 0


@pytest.fixture(scope="module")
def thinking_model() -> Path:
    from support.ggufs import tiny_gguf_cached

    return tiny_gguf_cached(
        CACHE / "ggufs",
        vocab="qwen2",
        template="Qwen-Qwen3-0.6B.jinja",
        answer="<think>Pondering deeply</think>" + ANSWER,
    )


def test_thinking_is_dim_and_can_be_hidden(
    thinking_model: Path, tmp_path: Path, terminals: list[Terminal]
) -> None:
    term = Terminal(str(thinking_model), home=tmp_path / "home")
    terminals.append(term)
    term.send("Think first.")
    raw = term.raw_until_prompt()
    assert "\x1b[2;3mPondering deeply" in raw and ANSWER in clean(raw)
    assert "thinking is hidden" in term.run("/think hide")
    term.send("Again.")
    raw = term.raw_until_prompt()
    assert "Pondering" not in raw and ANSWER in clean(raw)
    assert term.leave() == 0


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_chat_through_a_running_server(
    api: str, answer_server: EngyServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    term = Terminal("--url", answer_server.url, "--api", api, home=tmp_path / "home")
    terminals.append(term)
    assert f"({api})" in term.banner
    out = term.run("Hello over HTTP?")
    assert ANSWER in out and "context " in stats_of(out)
    assert used_tokens(term.run("/tokens")) > 0
    assert "error: model not found: no-such-model" in term.run("/model no-such-model")
    term.run("/system Be kind.")
    assert ANSWER in term.run("And with a system prompt?")
    saved = tmp_path / "c.json"
    term.run(f"/save {saved}")
    assert len(json.loads(saved.read_text())["messages"]) == 4
    assert term.leave() == 0


def test_chat_reads_a_pipe_too(tiny_answer: Path, tmp_path: Path) -> None:
    env = dict(os.environ, ENGY_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [sys.executable, "-m", "engy_local", "chat", str(tiny_answer)],
        input="Hi\n/tokens\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT,
    )
    assert r.returncode == 0, r.stderr
    assert ANSWER in r.stdout and "context: " in r.stdout


def test_a_missing_model_is_one_line_and_exit_1(tmp_path: Path) -> None:
    env = dict(os.environ, ENGY_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [sys.executable, "-m", "engy_local", "chat", str(tmp_path / "none.gguf")],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT,
    )
    assert r.returncode == 1
    assert r.stdout.strip() == f"error: no such file: {tmp_path / 'none.gguf'}"
