"""The conversation `engy chat` holds, and its JSON file format.

`/save FILE` writes, and `/load FILE` reads, one JSON object:

    {
      "format": "engy-chat/1",
      "model": "gemma-3-270m",
      "system": "You are terse.",
      "messages": [
        {"role": "user", "content": "What is a GGUF?"},
        {"role": "assistant", "content": "A model file format.",
         "thinking": "The user asks..."}
      ]
    }

- `format`: always "engy-chat/1"; a file without it is read as this version.
- `model`: the model the conversation was held with; informational, `/load`
  keeps the model that is running.
- `system`: the system prompt, or null.
- `messages`: user and assistant turns in order. `content` is the text;
  an assistant turn may add `thinking` (its reasoning, as shown). Tool calls
  are shown but not kept: the REPL runs no tools, so no result could follow.
  Images attached with `/image` are not kept either, only the text.

Reading is strict about what it needs (a list of messages with a known role
and text content) and ignores keys it does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...chat import Answer, ChatRequest, Image, Message, Part, Sampling, Text, Thinking
from ...errors import ConversationFileError

FORMAT = "engy-chat/1"


@dataclass
class Conversation:
    model: str
    system: str | None = None
    thinking: bool | None = None  # the template's switch; None: the model's default
    max_tokens: int | None = None
    temperature: float | None = None
    messages: list[Message] = field(default_factory=list)

    def request(self, question: str | None = None, images: tuple[Image, ...] = ()) -> ChatRequest:
        """The request that asks `question` next, with `images` before its
        text (None: the conversation as it stands, for counting)."""
        messages = list(self.messages)
        if self.system:
            messages.insert(0, Message("system", (Text(self.system),)))
        if question is not None:
            messages.append(Message("user", (*images, Text(question))))
        return ChatRequest(
            model=self.model,
            messages=tuple(messages),
            sampling=Sampling(max_tokens=self.max_tokens, temperature=self.temperature),
            thinking=self.thinking,
            overflow="shrink",
        )

    def add(self, question: str, answer: Answer, images: tuple[Image, ...] = ()) -> None:
        """Record a question (with its images) and its (maybe partial) answer."""
        self.messages.append(Message("user", (*images, Text(question))))
        parts: list[Part] = []
        if answer.thinking:
            parts.append(Thinking(answer.thinking))
        parts.append(Text(answer.text))
        self.messages.append(Message("assistant", tuple(parts)))

    def clear(self) -> None:
        self.messages.clear()

    # ---- the file format ----

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "system": self.system,
            "messages": [_message_json(m) for m in self.messages],
        }

    def save(self, path: Path) -> None:
        text = json.dumps(self.to_json(), ensure_ascii=False, indent=2) + "\n"
        path.expanduser().write_text(text, encoding="utf-8")

    def load(self, path: Path) -> None:
        """Replace system prompt and messages with those of the file."""
        try:
            data = json.loads(path.expanduser().read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConversationFileError(f"cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ConversationFileError(f"{path} is not JSON: {exc}") from None
        system, messages = from_json(data)
        self.system = system
        self.messages = messages


def _message_json(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.text()}
    thinking = "".join(p.text for p in message.parts if isinstance(p, Thinking))
    if thinking:
        out["thinking"] = thinking
    return out


def from_json(data: Any) -> tuple[str | None, list[Message]]:
    """(system prompt, messages) of a conversation file's JSON."""
    if not isinstance(data, dict):
        raise ConversationFileError("a conversation file holds a JSON object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise ConversationFileError(f"unknown format {fmt!r}: expected {FORMAT!r}")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise ConversationFileError("system: expected a string or null")
    raw = data.get("messages")
    if not isinstance(raw, list):
        raise ConversationFileError("messages: expected a list")
    return system or None, [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]


def _message(raw: Any, path: str) -> Message:
    if not isinstance(raw, dict):
        raise ConversationFileError(f"{path}: expected an object")
    role = raw.get("role")
    if role not in ("user", "assistant"):
        raise ConversationFileError(f"{path}.role: expected user or assistant, got {role!r}")
    content = raw.get("content", "")
    if not isinstance(content, str):
        raise ConversationFileError(f"{path}.content: expected a string")
    parts: list[Part] = []
    thinking = raw.get("thinking")
    if role == "assistant" and isinstance(thinking, str) and thinking:
        parts.append(Thinking(thinking))
    parts.append(Text(content))
    return Message(role, tuple(parts))
