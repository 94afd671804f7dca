"""The metrics endpoint's HTTP: what a request head parses to, and what each gets back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.metrics.http_wire import (
    METRICS_TYPE,
    HttpRefusal,
    RequestHead,
    answer,
    parse_head,
    refusal,
    wants_metrics,
)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def headers_and_body(response: bytes) -> tuple[dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")[1:]
    return dict(line.split(": ", 1) for line in lines), body


def never(*_args: object) -> object:
    raise AssertionError("not asked")


def test_a_request_line_gives_its_method_and_path_without_the_query() -> None:
    head = b"GET /metrics?name[]=up HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
    assert parse_head(head) == RequestHead("GET", "/metrics")
    assert parse_head(b"HEAD /ready HTTP/1.0\r\n\r\n") == RequestHead("HEAD", "/ready")


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),  # HTTP/0.9
        (b"GET  /metrics HTTP/1.1\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
        (b"get /metrics HTTP/1.1\r\n\r\n", 400),
        (b"GET http://host/metrics HTTP/1.1\r\n\r\n", 400),  # absolute form
        (b"GET /m\xc3\xa9trics HTTP/1.1\r\n\r\n", 400),
        (b"GET /me\x00trics HTTP/1.1\r\n\r\n", 400),
    ],
)
def test_malformed_heads_are_refused_with_a_status(head: bytes, status: int) -> None:
    with pytest.raises(HttpRefusal) as refused:
        parse_head(head)
    assert refused.value.status == status
    response = refusal(refused.value)
    assert status_of(response) == status
    headers, body = headers_and_body(response)
    assert headers["Connection"] == "close" and int(headers["Content-Length"]) == len(body)
    assert body.decode().strip() == refused.value.reason


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_refused_never_anything_else(head: bytes) -> None:
    try:
        parsed = parse_head(head)
    except HttpRefusal as exc:
        assert exc.status in (400, 505)
    else:
        assert parsed.path.startswith("/") and parsed.method.isupper()


def test_health_ready_and_metrics() -> None:
    health = answer(RequestHead("GET", "/health"), never, b"")
    assert status_of(health) == 200 and health.endswith(b"\r\n\r\nok\n")

    ready = answer(RequestHead("GET", "/ready"), lambda: (True, "ready"), b"")
    assert status_of(ready) == 200 and ready.endswith(b"ready\n")
    waiting = answer(
        RequestHead("GET", "/ready"),
        lambda: (False, "registered, but fenced"),
        b"",
    )
    assert status_of(waiting) == 503 and waiting.endswith(b"registered, but fenced\n")

    metrics = answer(RequestHead("GET", "/metrics"), never, b"up 1\n")
    headers, body = headers_and_body(metrics)
    assert status_of(metrics) == 200 and body == b"up 1\n"
    assert headers["Content-Type"] == METRICS_TYPE


def test_head_answers_carry_the_length_but_no_body() -> None:
    response = answer(RequestHead("HEAD", "/metrics"), never, b"up 1\n")
    headers, body = headers_and_body(response)
    assert status_of(response) == 200 and body == b"" and headers["Content-Length"] == "5"


def test_other_paths_and_methods() -> None:
    missing = answer(RequestHead("GET", "/admin"), never, b"")
    assert status_of(missing) == 404 and b"/metrics, /health, /ready" in missing
    posted = answer(RequestHead("POST", "/metrics"), never, b"")
    headers, _ = headers_and_body(posted)
    assert status_of(posted) == 405 and headers["Allow"] == "GET, HEAD"


def test_only_a_get_or_head_of_metrics_is_worth_rendering_for() -> None:
    assert wants_metrics(RequestHead("GET", "/metrics"))
    assert wants_metrics(RequestHead("HEAD", "/metrics"))
    assert not wants_metrics(RequestHead("POST", "/metrics"))
    assert not wants_metrics(RequestHead("GET", "/ready"))
