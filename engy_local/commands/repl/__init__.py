"""`engy chat`: an interactive REPL on the same translation layer as the
server. `session` runs the loop, `conversation` holds the turns (and their
JSON file format), `view` draws answers, `reader` reads input, `backends`
loads the model or connects, `remote` talks to a server for `--url`."""

from __future__ import annotations

from ...errors import ConversationFileError
from .backends import ChatOptions, open_backend
from .conversation import Conversation
from .session import Session, run_chat

__all__ = [
    "ChatOptions",
    "Conversation",
    "ConversationFileError",
    "Session",
    "open_backend",
    "run_chat",
]
