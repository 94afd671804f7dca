"""The console's HTTP server: routes, forms and redirects, on the standard library's
threading HTTP server (each request in its own thread; the cluster calls block).

A form that changes something answers with a redirect to the page to look at next,
carrying what happened (`?done=`) or why not (`?failed=`) as a notice.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from strom.cli.common import CommandError, ExitCode
from strom.cli.group_model import ResetMode, ResetTarget, parse_datetime_ms
from strom.console import group_pages, groups, pages
from strom.console.backend import ClusterBackend
from strom.console.browse import BrowseError, BrowseQuery, parse_headers
from strom.console.feed import MetricsFeed
from strom.console.html import Notice, page, path_part, query_href
from strom.console.search import TIME_LIMIT_S, Searches

log = logging.getLogger("strom.console")

MAX_FORM_BYTES = 1024 * 1024
DRAIN_LIMIT = 64 * 1024 * 1024
STATIC = {"console.css": "text/css", "console.js": "text/javascript"}


class BadRequest(Exception):
    """A form or query the console cannot use; the message says which field and why."""


class TooLarge(BadRequest):
    """A form over MAX_FORM_BYTES."""


class Console:
    """What every request handler shares: the backend, the searches, the metrics feed."""

    def __init__(self, backend: ClusterBackend, feed: MetricsFeed) -> None:
        self.backend = backend
        self.feed = feed
        self.searches = Searches(backend)


Route = tuple[str, re.Pattern[str], Callable[..., None]]


class ConsoleHandler(BaseHTTPRequestHandler):
    console: Console
    server_version = "strom-console"

    # --- plumbing -------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = dict(parse_qsl(url.query, keep_blank_values=True))
        for verb, pattern, handler in ROUTES:
            match = pattern.fullmatch(url.path)
            if verb == method and match:
                args = [unquote(part) for part in match.groups()]
                try:
                    handler(self, *args)
                except CommandError as exc:
                    self._failed(exc.message, _status(exc))
                except TooLarge as exc:
                    self._failed(str(exc), HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
                except (BadRequest, BrowseError) as exc:
                    self._failed(str(exc), HTTPStatus.BAD_REQUEST)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the browser went away
                except Exception as exc:  # a bug: say so, log it, keep serving
                    log.exception("%s %s failed", method, url.path)
                    self._failed(
                        f"the console failed: {type(exc).__name__}: {exc}",
                        HTTPStatus.INTERNAL_SERVER_ERROR,
                    )
                return
        self._failed(f"no page at {url.path}", HTTPStatus.NOT_FOUND)

    def _failed(self, message: str, status: HTTPStatus) -> None:
        self._send_page("Something went wrong", "", status, [Notice(message, error=True)])

    def _notices(self) -> list[Notice]:
        notices = []
        if self.query.get("done"):
            notices.append(Notice(self.query["done"]))
        if self.query.get("failed"):
            notices.append(Notice(self.query["failed"], error=True))
        return notices

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _send_page(
        self,
        title: str,
        body: str,
        status: HTTPStatus = HTTPStatus.OK,
        notices: list[Notice] | None = None,
        section: str = "",
    ) -> None:
        shown = (notices or []) + self._notices()
        text = page(
            title, body, section=section, cluster=self.console.backend.bootstrap, notices=shown
        )
        self._send(status, text.encode(), "text/html; charset=utf-8")

    def _redirect(self, where: str, **notice: str) -> None:
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", query_href(where, **notice))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _after(self, action: Callable[[], str], where: str, done_at: str = "") -> None:
        """Run a form's action and redirect: to `done_at` (else `where`) with what it says
        it did, or to `where` with why it failed."""
        try:
            done = action()
        except CommandError as exc:
            self._redirect(where, failed=exc.message)
        except (BadRequest, BrowseError) as exc:
            self._redirect(where, failed=str(exc))
        else:
            self._redirect(done_at or where, done=done)

    def _form(self) -> dict[str, str]:
        text = self.headers.get("Content-Length") or "0"
        length = int(text) if text.isdigit() else -1
        if length < 0:
            raise BadRequest(f"Content-Length: {text!r} is not a length")
        if length > MAX_FORM_BYTES:
            # Read what was sent (up to a bound, in pieces) so that the client is listening
            # for the answer when it comes; beyond the bound the connection is just closed.
            self.close_connection = True
            if length <= DRAIN_LIMIT:
                while length > 0:
                    piece = self.rfile.read(min(length, 64 * 1024))
                    if not piece:
                        break
                    length -= len(piece)
            raise TooLarge(f"the form is larger than {MAX_FORM_BYTES} bytes")
        text = self.rfile.read(length).decode("utf-8", errors="replace")
        return dict(parse_qsl(text, keep_blank_values=True))

    # --- pages ----------------------------------------------------------------------------

    def health(self) -> None:
        self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")

    def static(self, name: str) -> None:
        if name not in STATIC:
            raise CommandError(f"no file {name!r}", ExitCode.USAGE)
        data = resources.files("strom.console").joinpath("static", name).read_bytes()
        self._send(HTTPStatus.OK, data, f"{STATIC[name]}; charset=utf-8")

    def cluster(self) -> None:
        overview = self.console.backend.overview()
        feed = self.console.feed
        charts = feed.charts() if feed.enabled else None
        self._send_page("Cluster", pages.cluster_body(overview, charts), section="/")

    def throughput(self) -> None:
        body = self.console.feed.charts() if self.console.feed.enabled else ""
        self._send(HTTPStatus.OK, body.encode(), "text/html; charset=utf-8")

    def topics(self) -> None:
        shown = self.query.get("internal") == "1"
        body = pages.topics_body(self.console.backend.topics(), shown)
        self._send_page("Topics", body, section="/topics")

    def create_topic(self) -> None:
        form = self._form()
        name = form.get("name", "").strip()
        if not name:
            raise BadRequest("name: a topic needs a name")
        configs = {}
        for number, line in enumerate(form.get("configs", "").splitlines(), start=1):
            if line.strip():
                key, sep, value = line.partition("=")
                if not sep or not key.strip():
                    raise BadRequest(f"configs, line {number}: write key=value")
                configs[key.strip()] = value.strip()
        partitions = _whole(form, "partitions", -1)
        replicas = _whole(form, "replication_factor", -1)

        def create() -> str:
            self.console.backend.create_topic(name, partitions, replicas, configs)
            return f"Created topic {name}"

        self._after(create, "/topics", done_at=f"/topics/{path_part(name)}")

    def topic(self, name: str) -> None:
        body = pages.topic_body(self.console.backend.topic(name))
        self._send_page(f"Topic {name}", body, section="/topics")

    def alter_config(self, name: str) -> None:
        form = self._form()
        key = form.get("key", "").strip()
        if not key:
            raise BadRequest("key: name the config to change")
        value = None if form.get("reset") else form.get("value", "")

        def alter() -> str:
            self.console.backend.alter_topic_config(name, key, value)
            return f"{key} uses its default again" if value is None else f"Set {key} to {value!r}"

        self._after(alter, f"/topics/{path_part(name)}")

    def add_partitions(self, name: str) -> None:
        total = _whole(self._form(), "count", 0)

        def grow() -> str:
            self.console.backend.add_partitions(name, total)
            return f"{name} has {total} partitions"

        self._after(grow, f"/topics/{path_part(name)}")

    def delete_topic(self, name: str) -> None:
        confirmed = self._form().get("confirm", "") == name

        def delete() -> str:
            if not confirmed:
                raise BadRequest(f"Not deleted: type {name} exactly to confirm")
            self.console.backend.delete_topic(name)
            return f"Deleted topic {name}"

        self._after(delete, f"/topics/{path_part(name)}", done_at="/topics")

    def messages(self, name: str) -> None:
        backend = self.console.backend
        described = backend.connection.topic(backend.metadata(), name)
        query = search = None
        if self.query:  # a search asked without JavaScript: wait for it here
            query = BrowseQuery.parse(self.query)
            search = self.console.searches.start(name, query)
            search.wait(TIME_LIMIT_S + 5)
        body = pages.messages_body(name, len(described.partitions), query, search)
        self._send_page(f"Messages in {name}", body, section="/topics")

    def start_search(self, name: str) -> None:
        search = self.console.searches.start(name, BrowseQuery.parse(self.query))
        data = json.dumps({"id": search.id, "url": f"/searches/{search.id}"}).encode()
        self._send(HTTPStatus.ACCEPTED, data, "application/json")

    def search_state(self, search_id: str) -> None:
        search = self.console.searches.get(search_id)
        if search is None:
            raise CommandError("that search is no longer kept; search again", ExitCode.USAGE)
        self._send(HTTPStatus.OK, pages.search_results(search).encode(), "text/html; charset=utf-8")

    def produce(self, name: str) -> None:
        form = self._form()
        chosen = form.get("partition", "any")
        partition = None if chosen in ("", "any") else _whole(form, "partition", 0)
        key = form.get("key", "")

        def produce() -> str:
            written = self.console.backend.produce(
                name,
                partition,
                key.encode() if key else None,
                form.get("value", "").encode(),
                parse_headers(form.get("headers", "")),
            )
            return f"Produced to partition {written[0]} at offset {written[1]}"

        self._after(produce, f"/topics/{path_part(name)}/messages")

    def groups(self) -> None:
        found, warnings = groups.list_groups(self.console.backend)
        notices = [Notice(w, error=True) for w in warnings]
        self._send_page(
            "Groups", group_pages.groups_body(found), notices=notices, section="/groups"
        )

    def group(self, group: str) -> None:
        detail = groups.group_detail(self.console.backend, group)
        body = group_pages.group_body(group, detail)
        self._send_page(f"Group {group}", body, section="/groups")

    def reset_group(self, group: str) -> None:
        form = self._form()

        def reset() -> str:
            target = _reset_target(form.get("to", ""), form.get("value", "").strip())
            plan, warnings = groups.reset_offsets(
                self.console.backend, group, form.get("topic", "").strip() or None, target
            )
            moved = ", ".join(f"{p.topic}:{p.partition} → {p.new}" for p in plan)
            return " ".join([f"Committed {moved}.", *warnings])

        self._after(reset, f"/groups/{path_part(group)}")

    def security(self) -> None:
        view = groups.security(self.console.backend)
        self._send_page("Security", group_pages.security_body(view), section="/security")


def _status(error: CommandError) -> HTTPStatus:
    if error.exit_code is ExitCode.UNREACHABLE:
        return HTTPStatus.BAD_GATEWAY
    if "does not exist" in error.message or "no such" in error.message:
        return HTTPStatus.NOT_FOUND
    return HTTPStatus.BAD_REQUEST


def _whole(form: dict[str, str], name: str, default: int) -> int:
    text = form.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name}: {text!r} is not a whole number") from None


def _reset_target(to: str, value: str) -> ResetTarget:
    try:
        match to:
            case "earliest":
                return ResetTarget(ResetMode.EARLIEST)
            case "latest":
                return ResetTarget(ResetMode.LATEST)
            case "offset":
                return ResetTarget(ResetMode.OFFSET, int(value))
            case "datetime":
                return ResetTarget(ResetMode.DATETIME, parse_datetime_ms(value))
    except ValueError:
        raise BadRequest(f"{value!r} is not an offset") from None
    except CommandError as exc:
        raise BadRequest(exc.message) from None
    raise BadRequest(f"to: {to!r} is not earliest, latest, offset or datetime")


_NAME = r"([^/]+)"
ROUTES: list[Route] = [
    ("GET", re.compile(r"/health"), ConsoleHandler.health),
    ("GET", re.compile(r"/static/([\w.]+)"), ConsoleHandler.static),
    ("GET", re.compile(r"/"), ConsoleHandler.cluster),
    ("GET", re.compile(r"/cluster/throughput"), ConsoleHandler.throughput),
    ("GET", re.compile(r"/topics"), ConsoleHandler.topics),
    ("POST", re.compile(r"/topics"), ConsoleHandler.create_topic),
    ("GET", re.compile(rf"/topics/{_NAME}"), ConsoleHandler.topic),
    ("POST", re.compile(rf"/topics/{_NAME}/configs"), ConsoleHandler.alter_config),
    ("POST", re.compile(rf"/topics/{_NAME}/partitions"), ConsoleHandler.add_partitions),
    ("POST", re.compile(rf"/topics/{_NAME}/delete"), ConsoleHandler.delete_topic),
    ("GET", re.compile(rf"/topics/{_NAME}/messages"), ConsoleHandler.messages),
    ("GET", re.compile(rf"/topics/{_NAME}/search"), ConsoleHandler.start_search),
    ("POST", re.compile(rf"/topics/{_NAME}/produce"), ConsoleHandler.produce),
    ("GET", re.compile(r"/searches/([\w-]+)"), ConsoleHandler.search_state),
    ("GET", re.compile(r"/groups"), ConsoleHandler.groups),
    ("GET", re.compile(rf"/groups/{_NAME}"), ConsoleHandler.group),
    ("POST", re.compile(rf"/groups/{_NAME}/reset"), ConsoleHandler.reset_group),
    ("GET", re.compile(r"/security"), ConsoleHandler.security),
]


def make_server(host: str, port: int, console: Console) -> ThreadingHTTPServer:
    handler = type("BoundConsoleHandler", (ConsoleHandler,), {"console": console})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
