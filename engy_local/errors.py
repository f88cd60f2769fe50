"""Every error engy raises, in one tree. Errors are raised where they happen
and mapped to each protocol's error body in one place (`protocols.anthropic
.error_body`, `protocols.responses.error_body`, `protocols.chat_completions
.error_body`); the commands print any of them as one line and exit 1.

    EngyError                   status  meaning
    ├── InvalidRequest            400   bad JSON, a wrong type, a missing field
    │   ├── PromptTooLong         400   the prompt does not fit the context window
    │   ├── TemplateLimitHit      400   the chat template ran past its time or size limit
    │   └── UndecodableImage      400   an image the projector cannot decode
    ├── Unauthorized              401   missing or wrong API key
    ├── Forbidden                 403   a Host or Origin this server does not accept
    ├── ModelNotFound             404   no such model
    ├── NotFoundRoute             404   no such endpoint
    ├── RequestTooLarge           413   body over the size limit
    ├── Busy                      429   the request queue is full
    ├── NoWorker                  503   no loaded model meets the provider requirements
    │   ├── UpstreamUnavailable   503   an upstream engine cannot be reached
    │   └── ContextFull           503   no room in the KV cache for a prompt beside the others
    ├── GenerationTimeout         504   a generation ran past --timeout
    ├── ServerError               500   anything else that went wrong inside
    │   ├── UpstreamLost          500   an upstream's stream broke mid-answer
    │   └── BrokenAnswer          500   an answer that breaks the schema it was asked to follow
    ├── RemoteError               any   what a server answered `engy chat --url`
    │
    │   Set-up errors, from the commands (status 500 if one ever reaches HTTP):
    ├── CatalogError                    a MODEL that cannot be served, a catalog or store problem
    │   ├── NotGGUF                     a file that is not a readable GGUF
    │   └── UnsafeName                  a name that could write or delete outside the store
    ├── PullError                       a pull that could not finish
    ├── ModelLoadError                  llama.cpp would not load a model or build its context
    │   ├── ProjectorLoadError          a vision projector that would not load
    │   ├── BadTemplate                 a chat template that does not compile
    │   ├── TokenizerError              a Hugging Face tokenizer that cannot be read
    │   └── DoesNotFit                  a window whose KV cache cannot fit the memory budget
    ├── KVTypeError                     a KV cache type llama.cpp does not take, or cannot run
    ├── RPCError                        an RPC worker that cannot be used
    ├── LaunchError                     a reason `engy launch` cannot go on
    └── ReplError                       `engy chat`: a file it cannot use
        ├── NotAnImage                  a file /image cannot attach
        └── ConversationFileError       a conversation file /load cannot read

Two signals inside the template sandbox (`prompt.template`) are not errors
of this tree on purpose and never leave that module: a watchdog's
BaseException that no handler may swallow, and jinja's own TemplateError
for `raise_exception`. Both become `InvalidRequest` there.
"""

from __future__ import annotations


class EngyError(Exception):
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(EngyError):
    status = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptTooLong(InvalidRequest):
    def __init__(self, tokens: int, maximum: int, message: str | None = None) -> None:
        super().__init__(message or f"prompt is too long: {tokens} tokens > {maximum} maximum")
        self.tokens = tokens
        self.maximum = maximum


class TemplateLimitHit(InvalidRequest):
    """The chat template ran past its time or size limit (a template that
    loops, or writes without end)."""


class UndecodableImage(InvalidRequest):
    """Image `index` (0-based, of those handed to the projector) is not an
    image it can decode."""

    def __init__(self, index: int) -> None:
        super().__init__(f"image {index + 1} of the request could not be decoded")
        self.index = index


class Unauthorized(EngyError):
    status = 401


class Forbidden(EngyError):
    status = 403


class ModelNotFound(EngyError):
    status = 404

    def __init__(self, model: str, served: tuple[str, ...] = ()) -> None:
        message = f"model not found: {model}"
        if served:
            message += f" (served here: {', '.join(served)}; `engy pull` adds more)"
        super().__init__(message)
        self.model = model
        self.served = served


class NotFoundRoute(EngyError):
    status = 404


class RequestTooLarge(EngyError):
    status = 413


class Busy(EngyError):
    status = 429

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NoWorker(EngyError):
    status = 503


class UpstreamUnavailable(NoWorker):
    """The upstream cannot be reached (connection refused, DNS, connect timeout)."""


class ContextFull(NoWorker):
    """The KV cache has no room for a prompt while the other sequences are
    busy (every idle one already freed)."""


class GenerationTimeout(EngyError):
    status = 504


class ServerError(EngyError):
    status = 500


class UpstreamLost(ServerError):
    """The upstream's stream broke or went wrong after it had begun."""


class BrokenAnswer(ServerError):
    """The answer ended, and breaks a part of its schema that the grammar
    could not hold (grammar/answercheck.py): never sent as a success."""


class RemoteError(EngyError):
    """An error a server answered `engy chat --url` with: the HTTP status
    (500 for one inside a stream), the error's type or code, its message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


# ---- set-up errors ------------------------------------------------------------


class CatalogError(EngyError):
    """A MODEL argument that cannot be served; the message says why."""


class NotGGUF(CatalogError):
    """A file that is not a GGUF this reader accepts."""


class UnsafeName(CatalogError):
    """A name that could write or delete outside the store."""


class PullError(EngyError):
    """A pull that could not finish; the message is one line for the user."""


class ModelLoadError(EngyError):
    """A model llama.cpp would not load, or a context it could not build."""


class ProjectorLoadError(ModelLoadError):
    pass


class BadTemplate(ModelLoadError):
    """The chat template's source does not compile."""


class TokenizerError(ModelLoadError):
    pass


class DoesNotFit(ModelLoadError):
    """A context window whose KV cache cannot fit the memory budget."""


class KVTypeError(EngyError):
    """A KV cache type llama.cpp does not take, or a combination it cannot run."""


class RPCError(EngyError):
    pass


class LaunchError(EngyError):
    """A reason `engy launch` cannot go on, said in one line."""


class ReplError(EngyError):
    """`engy chat`: a file it cannot attach or a conversation it cannot load."""


class NotAnImage(ReplError):
    """A file that cannot be attached; the message says why."""


class ConversationFileError(ReplError):
    """A conversation file that cannot be read; the message says why."""
