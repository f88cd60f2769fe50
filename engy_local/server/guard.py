"""Who may talk to the server: the Host and Origin checks, CORS, and the API
key compared in constant time.

A server on 127.0.0.1 is out of the network's reach but not the browser's: a
web page can send requests to it, and a page whose own name was rebound to
127.0.0.1 (DNS rebinding) can read the answers too. So, before any handler:

- Host: a request whose `Host` is not a loopback name of this server
  (`localhost`, `127.0.0.1`, `[::1]`, any port) or a name allowed with
  `--allow-host` gets 403. Names that merely end in `.localhost` or `.local`,
  `0.0.0.0` and `localhost.` are not loopback names: each can be made to
  resolve to this machine by whoever controls the page. A server bound to a
  non-loopback address is reachable under names nobody can list, so the Host
  is not checked there (such a server needs an API key, see `serve.py`).
- Origin: a request carrying an `Origin` that is not loopback (any scheme of
  http/https, any port) or allowed with `--allow-origin` gets 403, whether it
  is a preflight or a "simple" request (`text/plain`) a page may send without
  one. Requests with no Origin (the SDKs, curl, the agents) are unaffected.
- CORS: a preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
  allowed origin is answered with that origin, never `*`; answers to allowed
  origins carry it too.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Headers a preflight may ask for; what the SDKs and agents send.
_ALLOW_HEADERS = (
    "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, "
    "anthropic-dangerous-direct-browser-access, openai-beta, openai-organization, "
    "openai-project, x-stainless-arch, x-stainless-lang, x-stainless-os, "
    "x-stainless-package-version, x-stainless-retry-count, x-stainless-runtime, "
    "x-stainless-runtime-version, x-stainless-timeout"
)


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_names(values: Iterable[str]) -> tuple[str, ...]:
    """Option and environment values, each possibly a comma-separated list."""
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


def host_name(header: str) -> str:
    """The name part of a Host header, lowercased: `[::1]:8642` -> `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    if header.count(":") == 1:
        return header.rsplit(":", 1)[0]
    return header


def _origin(value: str) -> str:
    """`scheme://host[:port]`, lowercased, without a trailing slash."""
    return value.strip().rstrip("/").lower()


@dataclass(frozen=True)
class AccessPolicy:
    """Which Host and Origin headers are accepted."""

    check_host: bool = True
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    allowed_origins: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def build(
        cls, bind: str, allow_hosts: Iterable[str] = (), allow_origins: Iterable[str] = ()
    ) -> AccessPolicy:
        hosts = frozenset(host_name(h) for h in split_names(allow_hosts))
        return cls(
            check_host=is_loopback(bind) and "*" not in hosts,
            allowed_hosts=hosts,
            allowed_origins=frozenset(_origin(o) for o in split_names(allow_origins)),
        )

    def host_allowed(self, header: str | None) -> bool:
        if not self.check_host or header is None:
            return True  # HTTP/1.1 clients always send one; browsers do
        name = host_name(header)
        return name in LOOPBACK_NAMES or name in self.allowed_hosts

    def origin_allowed(self, origin: str) -> bool:
        value = _origin(origin)
        if value in self.allowed_origins:
            return True
        try:
            parts = urlsplit(value)
            hostname = parts.hostname
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and hostname in LOOPBACK_NAMES


def key_matches(expected: str, offered: Iterable[str | None]) -> bool:
    """Whether any offered key is `expected`, each compared in constant time
    (every candidate is compared, so the time says nothing either)."""
    want = expected.encode()
    found = False
    for key in offered:
        if key is not None:
            found |= hmac.compare_digest(want, key.encode("utf-8", "replace"))
    return found


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


Refuse = Callable[[Scope, str], ASGIApp]


class AccessMiddleware:
    """Applies an `AccessPolicy` before routing. `refuse(scope, message)`
    gives the 403 answer in the protocol the path speaks."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, refuse: Refuse) -> None:
        self.app = app
        self.policy = policy
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            answer = self.refuse(scope, f"host not allowed: {host!r} (see --allow-host)")
            await answer(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        if not self.policy.origin_allowed(origin):
            answer = self.refuse(scope, f"origin not allowed: {origin!r} (see --allow-origin)")
            await answer(scope, receive, send)
            return
        cors = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [
                        *cors,
                        (b"access-control-allow-methods", b"GET, POST, HEAD, OPTIONS"),
                        (b"access-control-allow-headers", _ALLOW_HEADERS.encode()),
                        (b"access-control-max-age", b"600"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)
