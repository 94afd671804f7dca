"""HTML building blocks for the console's pages: escaping, the page frame, tables, forms.

Every value that came from the cluster or the user passes through `esc`; the functions
here return strings of HTML and do nothing else.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

NAV = (("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Groups"), ("/security", "Security"))


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def path_part(text: str) -> str:
    """A topic or group name inside a URL path (any character is allowed in a group id)."""
    return quote(text, safe="")


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def query_href(path: str, **params: object) -> str:
    return f"{path}?{urlencode({k: str(v) for k, v in params.items()})}" if params else path


@dataclass(frozen=True, slots=True)
class Notice:
    """A message at the top of a page: what just happened, or why it failed."""

    text: str
    error: bool = False

    def render(self) -> str:
        kind = "error" if self.error else "ok"
        role = "alert" if self.error else "status"
        return f'<p class="notice {kind}" role="{role}">{esc(self.text)}</p>'


def page(
    title: str,
    body: str,
    *,
    section: str = "",
    cluster: str = "",
    notices: Sequence[Notice] = (),
) -> str:
    """A whole page: the navigation (with `section` marked), the notices, then `body`."""
    items = "".join(
        f'<a href="{href}"{" aria-current=page" if href == section else ""}>{name}</a>'
        for href, name in NAV
    )
    shown = "".join(n.render() for n in notices)
    where = f'<span class="cluster">{esc(cluster)}</span>' if cluster else ""
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · strom console</title>"
        '<link rel=stylesheet href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head>'
        f"<body><header><strong>strom console</strong><nav>{items}</nav>{where}</header>"
        f"<main><h1>{esc(title)}</h1>{shown}{body}</main></body></html>\n"
    )


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    empty: str = "None.",
    label: str = "",
    raw: bool = False,
) -> str:
    """A table of escaped cells (or cells that are HTML already, with raw=True)."""
    body = "".join(
        "<tr>" + "".join(f"<td>{cell if raw else esc(cell)}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    labelled = f' aria-label="{esc(label)}"' if label else ""
    return f"<table{labelled}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def definitions(pairs: Iterable[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
    return f"<dl>{items}</dl>"


def field(label: str, name: str, value: object = "", *, kind: str = "text", extra: str = "") -> str:
    return (
        f'<label>{esc(label)} <input type="{kind}" name="{esc(name)}" '
        f'value="{esc(value)}"{" " + extra if extra else ""}></label>'
    )


def select(label: str, name: str, options: Sequence[tuple[str, str]], chosen: str) -> str:
    rendered = "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(text)}</option>'
        for v, text in options
    )
    return f'<label>{esc(label)} <select name="{esc(name)}">{rendered}</select></label>'


def textarea(label: str, name: str, value: str = "", *, rows: int = 3) -> str:
    return (
        f'<label>{esc(label)} <textarea name="{esc(name)}" rows="{rows}">'
        f"{esc(value)}</textarea></label>"
    )


def form(
    action: str,
    content: str,
    button: str,
    *,
    method: str = "post",
    name: str = "",
    danger: bool = False,
) -> str:
    named = f' name="{esc(name)}" aria-label="{esc(name)}"' if name else ""
    style = ' class="danger"' if danger else ""
    return (
        f'<form method="{method}" action="{esc(action)}"{named}>{content}'
        f"<button{style}>{esc(button)}</button></form>"
    )


def section(title: str, content: str) -> str:
    return f"<section><h2>{esc(title)}</h2>{content}</section>"
