"""What the server is doing, for the page: a bounded record of recent
requests and each one's state as it happens, the agent sessions they belong
to, and per-minute figures for the last hour.

A request's life, from the neutral events its generation passes through
(`metrics.Tracked` hands each one to its `Entry`):

    queued       submitted; waiting for the model (loading, tokenizing, a free sequence)
    reading      `Started` (prompt and cached tokens); `PromptProgress` says how far
    generating   the first text, thinking or tool-call piece
    done         `Finished`, with the stop reason and `Usage`
    failed       an error ended it
    stopped      the client went away, or stopped it

Nothing here sends anything: an event updates a few fields of its entry, a
change of state appends to `changes`. The page's event stream asks what
changed since it last looked (`updates`), a few times a second, only while
it is open; with no page open the record costs a few attribute writes per
request and one per output piece.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..chat import (
    ChatRequest,
    Event,
    Finished,
    PromptProgress,
    Started,
    Text,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
)
from ..protocols.sessions import (
    Api,
    Parts,
    diverged,
    first_turn,
    opening,
    prompt_parts,
    provenance,
    side_kind,
    title_text,
)

RECENT = 300  # requests kept
SESSIONS = 40  # sessions kept
TURNS = 60  # turns kept per lane of a session
MINUTES = 60  # per-minute figures kept
PREVIEW = 240  # characters of a prompt's last user text and of an answer kept
# A later turn that reads less than this share of the previous turn's prompt
# from the cache missed it.
CACHED_SHARE = 0.9
TERMINAL = frozenset({"done", "failed", "stopped"})
_PIECES = (TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStart)


@dataclass
class Minute:
    """What finished in one minute (unix time // 60)."""

    minute: int
    requests: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    decode_tokens: int = 0  # output tokens after each request's first
    decode_seconds: float = 0.0  # the time they took
    prefill_tokens: int = 0  # prompt tokens evaluated (not cached)
    prefill_seconds: float = 0.0
    ttft_sum: float = 0.0
    ttft_max: float = 0.0
    ttft_n: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.minute * 60,
            "requests": self.requests,
            "failed": self.failed,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "decode_tps": round(self.decode_tokens / self.decode_seconds, 2)
            if self.decode_seconds > 0
            else None,
            "prefill_tps": round(self.prefill_tokens / self.prefill_seconds, 1)
            if self.prefill_seconds > 0
            else None,
            "ttft_mean": round(self.ttft_sum / self.ttft_n, 3) if self.ttft_n else None,
            "ttft_max": round(self.ttft_max, 3) if self.ttft_n else None,
        }


@dataclass(eq=False)
class Lane:
    """One conversation within a session: the main one, a side request
    kind (title, summary), a subagent, a Codex thread."""

    index: int
    kind: str
    first: bytes  # digest of its conversation's first turn
    name: str = ""  # the client's thread id, when it names one
    parts: Parts = ()  # the latest turn's prompt, part by part
    last_prompt: int = 0  # prompt tokens of the latest turn that started
    turns: int = 0
    entries: deque[Entry] = field(default_factory=lambda: deque(maxlen=TURNS))


@dataclass(eq=False)
class Session:
    key: str
    id: str  # the client's session id; "" for one grouped by its prompt's opening
    source: str
    client: str
    started: float
    last: float
    title: str = ""
    lanes: list[Lane] = field(default_factory=list)

    def lane(self, kind: str, first: bytes, thread: str) -> Lane:
        for lane in self.lanes:
            if thread and lane.name == thread:
                return lane
            if not thread and kind and lane.kind == kind:
                return lane
            if not thread and not kind and lane.first == first and lane.kind != "title":
                return lane
        if not kind:
            kind = "main" if not any(lane.kind == "main" for lane in self.lanes) else "subagent"
        lane = Lane(len(self.lanes), kind, first, thread)
        self.lanes.append(lane)
        return lane

    def to_json(self, reveal: bool) -> dict[str, Any]:
        turns = [e for lane in self.lanes for e in lane.entries]
        prompt = sum(e.prompt_tokens for e in turns)
        return {
            "key": self.key,
            "id": self.id,
            "source": self.source,
            "client": self.client,
            "title": self.title if reveal else "",
            "started": self.started,
            "last": self.last,
            "prompt_tokens": prompt,
            "cached_tokens": sum(e.cached_tokens for e in turns),
            "lanes": [
                {
                    "index": lane.index,
                    "kind": lane.kind,
                    "name": lane.name,
                    "turns": lane.turns,
                    "entries": [e.turn_json() for e in lane.entries],
                }
                for lane in self.lanes
            ],
        }


@dataclass(eq=False)
class Entry:
    """One request, as the page shows it."""

    id: int
    record: Activity
    endpoint: str
    model: str
    client: str
    at: float  # unix time it came
    t0: float  # time.monotonic() then
    state: str = "queued"
    prompt_tokens: int = 0
    cached_tokens: int = 0
    read: int = 0  # prompt tokens in the sequence so far
    pieces: int = 0  # output pieces so far (tokens, near enough)
    output_tokens: int = 0
    t_started: float | None = None
    t_first: float | None = None
    t_end: float | None = None
    stop: str = ""
    error: str = ""
    miss: str = ""  # where the engine says the prompt left the cache
    preview: str = ""  # the prompt's last user text (prompt text: `reveal` only)
    answer: str = ""  # the answer's first text (idem)
    session: Session | None = None
    lane: Lane | None = None
    turn: int = 0  # 1, 2, ... within its lane
    changed: str = ""  # how its prompt differs from the lane's previous turn
    prev_prompt: int = 0  # prompt tokens of that turn

    # -- the lifecycle, from Tracked ------------------------------------

    def event(self, event: Event) -> None:
        if isinstance(event, _PIECES):
            self.pieces += 1
            if self.t_first is None:
                self.t_first, self.read = time.monotonic(), self.prompt_tokens
                self._set("generating")
            if len(self.answer) < PREVIEW and isinstance(event, TextDelta):
                self.answer += event.text
        elif isinstance(event, PromptProgress):
            self.read = event.done
        elif isinstance(event, Started):
            self.t_started = time.monotonic()
            self.prompt_tokens, self.cached_tokens = event.prompt_tokens, event.cached_tokens
            self.read, self.miss = event.cached_tokens, event.miss
            if self.lane is not None:
                self.lane.last_prompt = event.prompt_tokens
            self._set("reading")
        elif isinstance(event, Finished):
            u = event.usage
            self.prompt_tokens, self.cached_tokens = u.prompt_tokens, u.cached_tokens
            self.output_tokens, self.stop = u.output_tokens, event.stop_reason
            self.read = u.prompt_tokens
            self._end("done")

    def fail(self, error: BaseException) -> None:
        if self.state in TERMINAL:
            return
        if isinstance(error, Exception):  # EngyError among them
            self.error = f"{type(error).__name__}: {error}"
            self._end("failed")
        else:  # cancelled, or the stream closed: the client went away
            self._end("stopped")

    def close(self) -> None:
        """The generation is over; one that did not finish was stopped."""
        if self.state not in TERMINAL:
            self.output_tokens = self.pieces
            self._end("stopped")

    def _set(self, state: str) -> None:
        self.state = state
        self.record.touch(self)

    def _end(self, state: str) -> None:
        self.t_end, self.state = time.monotonic(), state
        self.record.finished(self)
        if self.session is not None:
            self.session.last = time.time()
            if self.lane is not None and self.lane.kind == "title" and state == "done":
                self.session.title = title_text(self.answer) or self.session.title
        self.record.touch(self)

    # -- figures ----------------------------------------------------------

    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t0

    def decode_tps(self, now: float) -> float | None:
        if self.t_first is None:
            return None
        end = self.t_end or now
        n = (self.output_tokens or self.pieces) - 1
        return n / (end - self.t_first) if n > 0 and end > self.t_first else None

    def verdict(self) -> str:
        """How the cache served this turn: "first" turn of its lane,
        "cached" (read the previous turn's prompt from cache), "missed"."""
        if self.t_started is None:
            return ""
        if self.turn <= 1 or not self.prev_prompt:
            return "first"
        return "cached" if self.cached_tokens >= CACHED_SHARE * self.prev_prompt else "missed"

    def to_json(self, reveal: bool, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        end = self.t_end or now
        eta = None
        if self.state == "reading" and self.t_started is not None:
            done, spent = self.read - self.cached_tokens, now - self.t_started
            if done > 0 and spent > 0:
                eta = (self.prompt_tokens - self.read) * spent / done
        tps = self.decode_tps(now)
        ttft = self.ttft()
        out = {
            "id": self.id,
            "at": self.at,
            "endpoint": self.endpoint,
            "model": self.model,
            "client": self.client,
            "state": self.state,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "read": self.read,
            "eta": None if eta is None else round(eta, 1),
            "output_tokens": self.output_tokens if self.state in TERMINAL else self.pieces,
            "tps": None if tps is None else round(tps, 1),
            "ttft": None if ttft is None else round(ttft, 3),
            "duration": round(end - self.t0, 3),
            "stop": self.stop,
            "error": self.error,
            "miss": self.miss,
            "session": self.session.key if self.session else "",
            "lane": self.lane.kind if self.lane else "",
            "turn": self.turn,
            "changed": self.changed,
            "prev_prompt": self.prev_prompt,
            "verdict": self.verdict(),
        }
        if reveal:
            out["preview"], out["answer"] = self.preview, self.answer
        return out

    def turn_json(self) -> dict[str, Any]:
        """The entry as a turn of its session (no prompt text)."""
        return {
            "id": self.id,
            "turn": self.turn,
            "at": self.at,
            "state": self.state,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prev_prompt": self.prev_prompt,
            "output_tokens": self.output_tokens if self.state in TERMINAL else self.pieces,
            "verdict": self.verdict(),
            "changed": self.changed,
            "miss": self.miss,
            "model": self.model,
        }


def _last_user_text(chat: ChatRequest) -> str:
    for message in reversed(chat.messages):
        if message.role == "user":
            text = "".join(p.text for p in message.parts if isinstance(p, Text))
            if text:
                return text[-PREVIEW:]
    return ""


class Activity:
    """The record the page reads. Everything runs on the event loop."""

    def __init__(self) -> None:
        self.clock = 0  # bumped by every change of state
        self.recent: deque[Entry] = deque(maxlen=RECENT)
        self.live: set[Entry] = set()
        self.changes: deque[tuple[int, Entry]] = deque(maxlen=RECENT)
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.minutes: deque[Minute] = deque(maxlen=MINUTES)
        self._next_id = 0

    def begin(
        self, api: Api, endpoint: str, headers: Mapping[str, str], body: Any, chat: ChatRequest
    ) -> Entry:
        """Record a request about to be submitted (headers: lower-case names)."""
        who = provenance(api, headers, body)
        parts = prompt_parts(api, body)
        self._next_id += 1
        now = time.time()
        entry = Entry(self._next_id, self, endpoint, chat.model, who.client, now, time.monotonic())
        entry.preview = _last_user_text(chat)
        key = f"{who.source}:{who.session}" if who.session else "prefix:" + opening(parts).hex()
        session = self.sessions.get(key)
        if session is None:
            session = Session(key, who.session, who.source or "prefix", who.client, now, now)
            self.sessions[key] = session
            while len(self.sessions) > SESSIONS:
                self.sessions.popitem(last=False)
        self.sessions.move_to_end(key)
        session.last = now
        lane = session.lane(side_kind(chat), first_turn(parts), who.thread)
        lane.turns += 1
        entry.session, entry.lane, entry.turn = session, lane, lane.turns
        if lane.parts:
            entry.changed, entry.prev_prompt = diverged(lane.parts, parts), lane.last_prompt
        lane.parts = parts
        lane.entries.append(entry)
        if len(self.recent) == RECENT:  # one never iterated must not stay "live" forever
            self.live.discard(self.recent[0])
        self.recent.append(entry)
        self.live.add(entry)
        self.touch(entry)
        return entry

    def touch(self, entry: Entry) -> None:
        self.clock += 1
        self.changes.append((self.clock, entry))

    def finished(self, entry: Entry) -> None:
        self.live.discard(entry)
        minute = int(time.time() // 60)
        if not self.minutes or self.minutes[-1].minute != minute:
            self.minutes.append(Minute(minute))
        m = self.minutes[-1]
        m.requests += 1
        if entry.state == "failed":
            m.failed += 1
        m.prompt_tokens += entry.prompt_tokens
        m.cached_tokens += entry.cached_tokens
        ttft = entry.ttft()
        if ttft is not None and entry.t_started is not None and entry.t_first is not None:
            m.ttft_sum, m.ttft_n, m.ttft_max = (
                m.ttft_sum + ttft,
                m.ttft_n + 1,
                max(m.ttft_max, ttft),
            )
            m.prefill_tokens += entry.prompt_tokens - entry.cached_tokens
            m.prefill_seconds += entry.t_first - entry.t_started
        output = entry.output_tokens or entry.pieces
        m.output_tokens += output
        if entry.t_first is not None and entry.t_end is not None and output > 1:
            m.decode_tokens += output - 1
            m.decode_seconds += entry.t_end - entry.t_first

    # -- what the page reads ------------------------------------------------

    def figures(self) -> list[dict[str, Any]]:
        horizon = int(time.time() // 60) - MINUTES
        return [m.to_json() for m in self.minutes if m.minute > horizon]

    def snapshot(self, reveal: bool) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "clock": self.clock,
            "requests": [e.to_json(reveal, now) for e in self.recent],
            "sessions": [s.to_json(reveal) for s in reversed(self.sessions.values())],
            "figures": self.figures(),
        }

    def updates(self, since: int, reveal: bool) -> tuple[dict[str, Any] | None, int]:
        """What changed after `since` (a `clock`), and the requests still
        running (their counts move without a change of state); None when
        nothing did. Returns the clock to ask with next time."""
        changed: dict[int, Entry] = {}
        for clock, entry in reversed(self.changes):
            if clock <= since:
                break
            changed[entry.id] = entry
        for entry in self.live:
            changed[entry.id] = entry
        if not changed:
            return None, self.clock
        now = time.monotonic()
        entries = sorted(changed.values(), key=lambda e: e.id)
        sessions = _unique(e.session for e in entries if e.session is not None)
        update = {
            "clock": self.clock,
            "requests": [e.to_json(reveal, now) for e in entries],
            "sessions": [s.to_json(reveal) for s in sessions],
        }
        if any(e.state in TERMINAL for e in entries):
            update["figures"] = self.figures()
        return update, self.clock


def _unique(sessions: Iterable[Session]) -> list[Session]:
    return list({id(s): s for s in sessions}.values())
