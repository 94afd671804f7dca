"""The little HTTP the metrics endpoint speaks: parse a request's head, choose the answer.

Only GET and HEAD of /metrics, /health and /ready are served, one request per
connection (every answer says `Connection: close`). Anything else gets a status code
and a one-line reason; nothing a client sends can make the node hold more than
MAX_HEAD_BYTES for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MAX_HEAD_BYTES = 8192
"""Longest request head (request line and headers) read; longer ones get 431."""
TEXT = "text/plain; charset=utf-8"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format."""
PATHS = ("/metrics", "/health", "/ready")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    path: str
    """The target without its query string."""


class HttpRefusal(Exception):
    """A request that gets an error status instead of an answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def parse_head(head: bytes) -> RequestHead:
    """The method and path of a request head (everything up to its blank line);
    HttpRefusal if it is not an HTTP/1.x request with an origin-form target."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HttpRefusal(400, "expected METHOD /path HTTP/1.1")
    method, target, version = parts
    if version not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise HttpRefusal(505, "only HTTP/1.0 and HTTP/1.1 are spoken here")
    if not method or not method.isascii() or not method.isalpha() or not method.isupper():
        raise HttpRefusal(400, "malformed method")
    if not target.startswith(b"/") or not all(0x21 <= byte <= 0x7E for byte in target):
        raise HttpRefusal(400, "malformed target: expected a path such as /metrics")
    path = target.split(b"?", 1)[0].decode("ascii")
    return RequestHead(method.decode("ascii"), path)


def answer(head: RequestHead, ready: Callable[[], tuple[bool, str]], metrics: bytes) -> bytes:
    """The whole response to `head`: `ready` is asked only if needed, and `metrics` (the
    exposition, rendered beforehand when `wants_metrics(head)`) only sent then."""
    if head.path not in PATHS:
        return response(404, f"no {head.path} here; try {', '.join(PATHS)}\n".encode())
    if head.method not in ("GET", "HEAD"):
        body = f"{head.method} is not allowed; use GET\n".encode()
        return response(405, body, extra=(("Allow", "GET, HEAD"),))
    with_body = head.method == "GET"
    if head.path == "/health":
        return response(200, b"ok\n", with_body=with_body)
    if head.path == "/ready":
        is_ready, why = ready()
        return response(200 if is_ready else 503, f"{why}\n".encode(), with_body=with_body)
    return response(200, metrics, METRICS_TYPE, with_body=with_body)


def wants_metrics(head: RequestHead) -> bool:
    """The request is answered with the metrics' exposition (worth rendering first)."""
    return head.path == "/metrics" and head.method in ("GET", "HEAD")


def refusal(error: HttpRefusal) -> bytes:
    return response(error.status, f"{error.reason}\n".encode())


def response(
    status: int,
    body: bytes,
    content_type: str = TEXT,
    *,
    with_body: bool = True,
    extra: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """An HTTP/1.1 response that closes the connection; HEAD answers carry no body but
    the length it would have."""
    headers = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in extra),
    ]
    return ("\r\n".join(headers) + "\r\n\r\n").encode("ascii") + (body if with_body else b"")
