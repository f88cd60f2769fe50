"""What the next turn's prompt starts with, once it holds this answer.

The KV cache holds an answer as the tokens the model wrote; the next turn
holds it as the template writes the message the client sends back. Where
the two part (a call written as bare JSON comes back as Qwen's
`<tool_call>` block, spaced as `tojson` spaces it; a text re-tokenized
otherwise than sampled), the next turn reads again from there. The engine
reads the template's version in while the client runs its tools
(runtime/engine/worker.py), so the next turn reads only what is new.
"""

from __future__ import annotations

from ..chat import Answer, ChatRequest, Message, Part, Text, ToolResult
from ..errors import EngyError
from .prepare import PromptModel, render
from .render.images import images_of

# Two contents for the message after the answer: the renderings agree up
# to where its content would begin.
PROBES = ("A", "B")


def next_message(answer: Answer, content: str) -> Message:
    """The message a client sends after `answer`: its calls' results, or
    the user's next words."""
    if answer.calls:
        results = (ToolResult(c.id, content, name=c.name) for c in answer.calls)
        return Message("tool", tuple(results))
    return Message("user", (Text(content),))


def next_turn(model: PromptModel, request: ChatRequest, answer: Answer) -> list[int]:
    """The tokens every next turn after `answer` starts with: the request's
    conversation, the answer as a message, and the next message's opening
    up to its content; less the last token, which may merge with what
    follows. An answer cut short (max_tokens, a stop sequence) is sent
    back as the client got it, as any other. [] where not known: an
    answer that thought (Anthropic clients send thinking back, Responses
    clients do not), images (their placeholders), a template that will not
    render it."""
    if answer.thinking or images_of(request.messages):
        return []
    parts: list[Part] = []
    if answer.text:
        parts.append(Text(answer.text))
    parts.extend(answer.calls)
    if not parts:
        return []
    said = Message("assistant", tuple(parts))
    try:
        a, b = (render(model, request, (said, next_message(answer, p)))[0].text for p in PROBES)
    except EngyError:  # a template that refuses the answer: the next turn will say so
        return []
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
    return model.tokenize(a[:n])[:-1]
