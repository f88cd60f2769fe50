"""Agent flows against a real engine, in-process (a ModelPool, no HTTP), and
the prompt cache's promise as a rule over the prompts seen before
(docs/caches-and-sessions.md, "What a turn reads from the cache").

- `Engine`: one pool; `ask(request)` runs a request to its end and returns
  a `Turn` with its prompt tokens, the prompt's marks, its answer's tokens
  and what the cache gave.
- `Cold`: the same model with nothing cached (no RAM cache, no disk, no
  drafts, its one sequence cleared before each request): the reference
  answer.
- `Promise`: the least a prompt reads from the cache, by the model's kind,
  given the earlier prompts whose states are kept.
- `parts_at_near_tie`: whether two greedy answers are the same, or part
  only where the model's two candidates' logits were within rounding.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import pytest

from engy_local.chat import (
    ChatRequest,
    Finished,
    Message,
    Sampling,
    Started,
    Text,
    TextDelta,
    ToolSpec,
    Usage,
)
from engy_local.prompt.parsing.detokenize import TextEnd, TokenText
from engy_local.runtime.cache.slots import common_prefix
from engy_local.runtime.engine import scheduler as scheduler_module
from engy_local.runtime.engine.job import Job
from engy_local.runtime.engine.local import ServedModel
from engy_local.runtime.loading.model import LoadOptions
from engy_local.runtime.pool import DiskSettings, ModelPool

Kind = Literal["full", "window", "recurrent"]

# ---- Claude Code-shaped conversations -------------------------------------

TOOLS = (
    ToolSpec(
        "Read",
        "Reads a file from the local filesystem. The file_path parameter must be an "
        "absolute path. By default it reads up to 2000 lines from the beginning.",
        {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The absolute path"},
                "offset": {"type": "integer", "description": "The line to start at"},
                "limit": {"type": "integer", "description": "The number of lines"},
            },
            "required": ["file_path"],
        },
    ),
    ToolSpec(
        "Bash",
        "Executes a bash command in a persistent shell session with an optional "
        "timeout. Use it for git, tests, builds; not for reading files.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to run"},
                "timeout": {"type": "integer", "description": "Milliseconds"},
            },
            "required": ["command"],
        },
    ),
)


def rules(seed: int, lines: int) -> str:
    """A system prompt of `lines` numbered rules (about 17 tokens a line)."""
    rng = random.Random(seed)
    verbs = ["prefer", "avoid", "check", "keep", "write", "read", "run", "name"]
    things = ["tests", "small diffs", "clear names", "the docs", "errors", "types", "logs"]
    return "\n".join(
        f"Rule {seed}.{i}: {rng.choice(verbs)} {rng.choice(things)} when working on "
        f"module {rng.randint(1, 999)}."
        for i in range(lines)
    )


MAIN_SYSTEM = "You are an interactive CLI coding agent.\n" + rules(0, 100)


@dataclass(frozen=True)
class Head:
    """What comes before a conversation's first user message: a system
    prompt (or a client's whole preamble) and the tools."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]


def head_of(body: dict[str, object]) -> Head:
    """A captured Chat Completions request's head: all before its last user
    message (the task), and its tools."""
    from engy_local.protocols.chat_completions_request import parse_request

    chat = parse_request(body).chat
    last = max(i for i, m in enumerate(chat.messages) if m.role == "user")
    return Head(chat.messages[:last], chat.tools)


def conversation(
    *turns: str,
    system: str = MAIN_SYSTEM,
    tools: tuple[ToolSpec, ...] = TOOLS,
    max_tokens: int = 12,
    head: Head | None = None,
) -> ChatRequest:
    """A greedy request: the system prompt and tools (or `head`), then user
    and assistant turns alternating, the last a user's."""
    roles = ["user", "assistant"]
    if head is not None:
        messages, tools = list(head.messages), head.tools
    else:
        messages = [Message("system", (Text(system),))] if system else []
    messages += [Message(roles[i % 2], (Text(t),)) for i, t in enumerate(turns)]  # type: ignore[arg-type]
    return ChatRequest(
        "m",
        tuple(messages),
        tools=tools,
        sampling=Sampling(max_tokens=max_tokens, temperature=0),
        thinking=False,
    )


def title_request(first_message: str) -> ChatRequest:
    """Claude Code's session-title side request: its own short system
    prompt, no tools, the user's first message."""
    system = (
        "Analyze if this message indicates a new conversation topic. If it does, "
        "extract a 2-3 word title that captures the new topic. Format your response "
        "as a JSON object with two fields: 'isNewTopic' and 'title'."
    )
    return conversation(first_message, system=system, tools=(), max_tokens=8)


def question(seed: int, lines: int = 20) -> str:
    rng = random.Random(1000 + seed)
    body = "\n".join(
        f"src/mod{seed}_{i}.py:{rng.randint(1, 400)}: value = compute({rng.randint(1, 99)})"
        for i in range(lines)
    )
    return f"Here is a log from my project:\n{body}\nWhat does line {seed} do?"


# ---- an engine, and what one request did ------------------------------------


@dataclass
class Turn:
    prompt: list[int]
    marks: tuple[int, ...]
    started: Started
    text: str
    output: list[int]
    finished: Finished
    answer_start: int = 0  # where a re-rendered last answer would begin (prepare.py)

    @property
    def cached(self) -> int:
        return self.started.cached_tokens


_outputs: dict[int, list[int]] = {}  # id(job) -> the tokens it generated


@contextmanager
def watching() -> Iterator[None]:
    """Records each job's generated tokens (Scheduler.admit wrapped)."""
    admit = scheduler_module.Scheduler.admit

    def admit_and_watch(self: scheduler_module.Scheduler, job: Job) -> None:
        admit(self, job)
        for r in self.running:
            if r.job is job:
                keep(r.text, _outputs.setdefault(id(job), []))

    def keep(text: TokenText, out: list[int]) -> None:
        push = text.push_token

        def push_and_keep(token: int) -> tuple[str, TextEnd | None]:
            out.append(token)
            return push(token)

        text.push_token = push_and_keep  # type: ignore[method-assign]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(scheduler_module.Scheduler, "admit", admit_and_watch)
        yield


async def _finish(pool: ModelPool, request: ChatRequest, cancel: bool = False) -> Turn:
    """`request` run to its end (`cancel`: its client goes away after the
    first piece of its answer)."""
    generation = await pool.submit(request)
    job = generation.job
    assert job is not None
    started, text, finished = None, "", None
    cancelled = False
    # Drained to its end even once cancelled: the loop must outlive the
    # job's last events (a server's does).
    async for event in generation:
        if isinstance(event, Started):
            started = event
        elif isinstance(event, TextDelta) and not cancelled:
            text += event.text
            if cancel:
                generation.cancel()
                cancelled = True
        elif isinstance(event, Finished):
            finished = event
    if cancelled and finished is None:
        finished = Finished("end", Usage())
    assert started is not None and finished is not None
    output = _outputs.pop(id(job), [])
    return Turn(list(job.tokens), job.marks, started, text, output, finished, job.answer_start)


def load_options(model: Path, **load: object) -> LoadOptions:
    """The options `engy serve MODEL` would load `model` with (a catalog
    model's chat template too), with a test's window, threads and cache."""
    from engy_local.server.backends import resolve_model
    from engy_local.server.options import ServeOptions

    defaults: dict[str, object] = {
        "ctx_size": 8192,
        "threads": 2,
        "parallel": 2,
        "cache_ram": 1 << 30,
        # Flash attention sums a row's cells in blocks by where they lie in
        # the cache: a copied sequence then differs from a fresh one in the
        # last bits (see test_hybrid.py).
        "flash_attn": "off",
    }
    defaults.update(load)
    options = resolve_model(str(model), ServeOptions()).options
    return replace(options, **defaults)  # type: ignore[arg-type]


@dataclass
class Engine:
    """One model pool (its RAM cache, its disk tier when `disk` is given)."""

    model: Path
    disk: Path | None = None
    load: dict[str, object] = field(default_factory=dict)
    pool: ModelPool = field(init=False)

    def __post_init__(self) -> None:
        self.pool = self._open()

    def _open(self) -> ModelPool:
        options = load_options(self.model, **self.load)
        settings = DiskSettings(self.disk, 1 << 30) if self.disk is not None else None
        return ModelPool([ServedModel("m", options)], primary="m", disk=settings)

    def ask(self, request: ChatRequest, cancel: bool = False) -> Turn:
        """`request` run to its end; then, as while a client runs its tools,
        the engine reads the next turn's start in (a pre-read) before the
        next request comes."""
        turn = asyncio.run(_finish(self.pool, request, cancel))
        self._settle()
        return turn

    def _settle(self) -> None:
        worker = self.pool._loaded["m"].worker  # the test looks inside
        deadline = time.monotonic() + 60
        while not worker.idle() and time.monotonic() < deadline:
            time.sleep(0.01)

    def restart(self) -> None:
        """A graceful stop (the disk tier keeps what it holds) and a new start."""
        self.pool.close()
        self.pool = self._open()

    def consistent(self) -> list[str]:
        """Idle sequences whose tokens and KV cells disagree (none)."""
        self._settle()  # the last step may still be ending
        return self.pool._loaded["m"].worker.scheduler.mismatches()

    def close(self) -> None:
        self.pool.close()


class Cold:
    """The model with nothing cached: each answer as a fresh server gives
    it (remembered by prompt: greedy, so the same prompt, the same answer)."""

    def __init__(self, model: Path, **load: object) -> None:
        options = load_options(model, parallel=1, cache_ram=0, speculative="off", **load)
        self.pool = ModelPool([ServedModel("m", options)], primary="m")
        self.answers: dict[tuple[int, ...], Turn] = {}

    def ask(self, request: ChatRequest) -> Turn:
        worker = self.pool._loaded["m"].worker
        while not worker.idle():
            time.sleep(0.01)
        scheduler = worker.scheduler  # idle: its thread waits for a job
        for slot in scheduler.slots:
            scheduler.ctx.clear(slot.id)
            slot.replace([])
        turn = asyncio.run(_finish(self.pool, request))
        assert turn.cached == 0, turn.started
        self.answers[tuple(turn.prompt)] = turn
        return turn

    def close(self) -> None:
        self.pool.close()


# ---- greedy answers: the same, or parted at a near tie ------------------------

# The most llama.cpp moved a logit between a step of one row and a step of
# several (test_speculate.py: 1.64 on gemma at 3k tokens of context).
ROUNDING = 2.0


def margin_at(model: Path, tokens: list[int], a: int, b: int, **load: object) -> float:
    """How far apart the logits of `a` and `b` are after `tokens` (one
    sequence read from nothing, the last token alone)."""
    options = replace(load_options(model, **load), parallel=1, speculative="off")
    return logit_margin(options, tokens, a, b)


def logit_margin(options: LoadOptions, tokens: list[int], a: int, b: int) -> float:
    """`margin_at` on a model loaded with `options` (one row a step for the
    prompt's last token; test_speculate.py's near ties use it too)."""
    import llama_cpp
    import numpy as np

    from engy_local.runtime.loading.context import Context
    from engy_local.runtime.loading.model import Model

    loaded = Model(options)
    ctx = Context(loaded)
    try:
        for start in range(0, len(tokens) - 1, ctx.n_batch):
            ctx.batch.clear()
            for i in range(start, min(len(tokens) - 1, start + ctx.n_batch)):
                ctx.batch.add(tokens[i], i, 0, False)
            assert ctx.decode()
        ctx.batch.clear()
        ctx.batch.add(tokens[-1], len(tokens) - 1, 0, True)
        assert ctx.decode()
        raw = llama_cpp.llama_get_logits_ith(ctx.ctx, 0)
        logits = np.ctypeslib.as_array(raw, shape=(loaded.n_vocab,))
        return abs(float(logits[a]) - float(logits[b]))
    finally:
        ctx.close()
        loaded.close()


def parted(turn: Turn, cold: Turn, model: Path, **load: object) -> str:
    """Empty where `turn`'s answer is the cold one's, or parts from it
    only at a near tie; else where and by how much it parts."""
    if turn.output == cold.output:
        return ""
    at = common_prefix(turn.output, cold.output)
    if at >= min(len(turn.output), len(cold.output)):
        return f"one answer stops at token {at}, the other goes on"
    margin = margin_at(
        model, cold.prompt + cold.output[:at], cold.output[at], turn.output[at], **load
    )
    if margin < ROUNDING:
        return ""
    return f"parted at output token {at}, not a tie: {margin:.2f} apart"


# ---- the promise, as a rule -----------------------------------------------------

# Of a recurrent state's checkpoints near the end of a prompt: resumed at most
# this far before it (prefixes.NEAR).
NEAR = 64
# The disk tier finds a prefix by whole blocks of this many tokens (diskcache.BLOCK).
BLOCK = 256


@dataclass(frozen=True)
class Seen:
    """An earlier prompt: its tokens, where its messages begin, whether it
    is its conversation's latest (the one the next turn extends), and
    whether its state has since gone through a restart (the disk tier)."""

    tokens: tuple[int, ...]
    marks: tuple[int, ...]
    latest: bool = True
    on_disk: bool = False
    chat: int | None = None  # its conversation (None: a side request)
    answer: int = 0  # where a re-rendered last answer would begin in it


def kind_of(model: Path, **load: object) -> Kind:
    from engy_local.runtime.loading.model import Model

    loaded = Model(replace(load_options(model, **load), parallel=1))
    try:
        if loaded.recurrent:
            return "recurrent"
        return "window" if loaded.n_swa > 0 else "full"
    finally:
        loaded.close()


def least(kind: Kind, prompt: list[int], seen: list[Seen]) -> int:
    """The least `prompt` reads from the cache, given the earlier prompts
    (the table in docs/caches-and-sessions.md, as a rule), with the RAM
    cache and the disk tier large enough for all of them:

    - full attention (MoE, quantized KV types too): the longest prefix it
      shares with any earlier prompt (after a restart, when that is at
      least one disk block);
    - a sliding window: the end of its conversation's latest prompt when it
      extends it or is that prompt again (checkpoints are kept there and one
      token before it), else where an earlier prompt's messages begin (its
      mark) when it shares that much;
    - recurrent or hybrid: as a sliding window, the latest prompt's end
      less up to NEAR tokens (its checkpoints are where that prompt's
      answer begins and one token before its end), an identical prompt too;
      where its answer begins when the next turn renders that anew (Qwen3's
      template drops the empty think block).

    Always at most all but the prompt's last token."""
    n = len(prompt)
    best = 0
    for s in seen:
        shared = common_prefix(list(s.tokens), prompt)
        if kind == "full":
            got = 0 if s.on_disk and shared < BLOCK else shared
        else:
            got = max((m for m in s.marks if m <= shared), default=0)
            extends = shared >= len(s.tokens)
            if s.latest and extends:
                got = max(got, len(s.tokens) - (NEAR if kind == "recurrent" else 0))
            elif kind == "recurrent" and s.latest and 0 < s.answer <= shared:
                got = max(got, s.answer)  # a template that renders the answer anew
        best = max(best, got)
    return max(0, min(best, n - 1))


# ---- agent flows, as operations -------------------------------------------------

SYSTEMS = (
    "You are an interactive CLI coding agent.\n" + rules(0, 14),
    "You are a code reviewer; answer briefly.\n" + rules(1, 12),
)


@dataclass
class Chat:
    head: int  # Session.heads: SYSTEMS', then the captured clients'
    turns: list[str]  # user, assistant, ..., user
    answer: str = ""  # the last answer's text


class Session:
    """A real engine driven through agent flows, each request checked
    against the promise (`least`), a cold engine's answer (or a near tie),
    and the sequences' bookkeeping. `log` is the flow so far, as the
    operation names a table row replays (`replay`)."""

    def __init__(
        self,
        model: Path,
        disk: Path,
        cold: Cold,
        kind: Kind,
        clients: tuple[Head, ...] = (),
        **load: object,
    ) -> None:
        self.model, self.kind, self.cold, self.load = model, kind, cold, load
        self.engine = Engine(model, disk=disk, load=dict(load))
        system = tuple(Head((Message("system", (Text(s),)),), TOOLS) for s in SYSTEMS)
        self.heads = system + clients  # captured clients' heads (support.captured) last
        self.clients = len(clients)
        self.chats: list[Chat] = []
        self.seen: list[Seen] = []
        self.log: list[str] = []
        self.salt = 0

    def close(self) -> None:
        self.engine.close()

    # the operations
    def new(self, system: int, seed: int) -> None:
        """A new conversation (the same system prompt and tools as another, or not)."""
        self.log.append(f"new {system} {seed}")
        self.chats.append(Chat(system, [question(seed, lines=4)]))
        self._ask(len(self.chats) - 1)

    def client(self, n: int, seed: int) -> None:
        """A new session of a launched client: its captured preamble and
        tools, a new task."""
        n %= self.clients
        self.log.append(f"client {n} {seed}")
        self.chats.append(Chat(len(SYSTEMS) + n, [question(seed, lines=4)]))
        self._ask(len(self.chats) - 1)

    def turn(self, chat: int) -> None:
        """The conversation's next turn (its answer sent back as it came)."""
        c = self.chats[chat % len(self.chats)]
        self.log.append(f"turn {chat % len(self.chats)}")
        self.salt += 1
        c.turns += [c.answer or "ok", f"Next, step {self.salt}: what about line {self.salt}?"]
        self._ask(self.chats.index(c))

    def edit(self, chat: int) -> None:
        """The history cut back to its first message, and that one changed."""
        c = self.chats[chat % len(self.chats)]
        self.log.append(f"edit {chat % len(self.chats)}")
        self.salt += 1
        c.turns = [c.turns[0] + f"\n(edited {self.salt})"]
        self._ask(self.chats.index(c))

    def resend(self, chat: int) -> None:
        """The conversation's last request sent again (a client's retry)."""
        self.log.append(f"resend {chat % len(self.chats)}")
        self._ask(chat % len(self.chats))

    def cancel(self, chat: int) -> None:
        """The conversation's next turn, its client gone after the answer's
        first piece (the next turn sends that piece back as the answer)."""
        c = self.chats[chat % len(self.chats)]
        self.log.append(f"cancel {chat % len(self.chats)}")
        self.salt += 1
        c.turns += [c.answer or "ok", f"Stop after a word, step {self.salt}."]
        self._ask(self.chats.index(c), cancel=True)

    def side(self, seed: int) -> None:
        """A side request: a title, with its own short system prompt."""
        self.log.append(f"side {seed}")
        self._check(title_request(question(seed, lines=2)), None)

    def restart(self) -> None:
        self.log.append("restart")
        self.engine.restart()
        self.seen = [replace(s, on_disk=True) for s in self.seen]

    # what each request is held to
    def _ask(self, chat: int, cancel: bool = False) -> None:
        c = self.chats[chat]
        request = conversation(*c.turns, head=self.heads[c.head], max_tokens=8)
        turn = self._check(request, chat, cancel)
        c.answer = turn.text

    def _check(self, request: ChatRequest, chat: int | None, cancel: bool = False) -> Turn:
        turn = self.engine.ask(request, cancel)
        want = least(self.kind, turn.prompt, self.seen)
        flow = " / ".join(self.log)
        assert turn.cached >= want, f"{flow}: read {turn.cached}, promised {want} ({turn.started})"
        assert self.engine.consistent() == [], flow
        if not cancel:  # (a cancelled answer is a piece of one)
            cold = self.cold.answers.get(tuple(turn.prompt)) or self.cold.ask(request)
            why = parted(turn, cold, self.model, **self.load)
            assert why == "", f"{flow}: {why}"
        # Only the latest prompt of a conversation is the one its next turn extends.
        if chat is not None:
            self.seen = [replace(s, latest=False) if s.chat == chat else s for s in self.seen]
        self.seen.append(Seen(tuple(turn.prompt), turn.marks, chat=chat, answer=turn.answer_start))
        return turn


def replay(session: Session, flow: list[str]) -> None:
    """A table row: the operations a shrunk failure took, by name."""
    for step in flow:
        name, *args = step.split()
        getattr(session, name)(*(int(a) for a in args))
