"""The cluster, topic and message pages, rendered from plain values (no cluster here)."""

from __future__ import annotations

from collections.abc import Sequence

from strom.cli.cluster import ClusterStatus, broker_state, format_ago, format_bytes
from strom.console.backend import ClusterOverview, ConfigValue, TopicDetail, TopicSummary
from strom.console.browse import BrowseQuery, Format, SearchIn, Start
from strom.console.html import (
    definitions,
    esc,
    field,
    form,
    link,
    path_part,
    section,
    select,
    table,
    textarea,
)
from strom.console.search import Search


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


def _size(size: int | None) -> str:
    return "-" if size is None else format_bytes(size)


# --- cluster -----------------------------------------------------------------------------


def cluster_body(overview: ClusterOverview, charts: str | None) -> str:
    status = overview.status
    facts = definitions(
        [
            ("Cluster id", status.cluster_id),
            ("Cluster name", status.cluster_name or "-"),
            (
                "Active controller",
                "-" if status.controller_id is None else str(status.controller_id),
            ),
            ("Metadata", f"ZooKeeper {status.zookeeper}" if status.zookeeper else "Raft quorum"),
            ("Topics", str(overview.topics)),
            ("Partitions", str(overview.partitions)),
            ("Under-replicated partitions", str(overview.under_replicated)),
            ("Offline partitions", str(overview.offline)),
        ]
    )
    brokers = table(
        ("Broker", "Address", "Rack", "State"),
        ((str(b.node_id), b.address, b.rack or "-", broker_state(b)) for b in status.brokers),
        label="Brokers",
        empty="No broker is registered.",
    )
    parts = [section("Overview", facts), section("Brokers", brokers), _quorum(status)]
    if charts is not None:
        parts.append(
            section(
                "Throughput",
                f'<div id="throughput" data-refresh="/cluster/throughput">{charts}</div>',
            )
        )
    else:
        parts.append(
            section(
                "Throughput",
                '<p class="empty">Start the console with --metrics URL (each broker\'s '
                "Prometheus endpoint) to see live throughput.</p>",
            )
        )
    return "".join(parts)


def _quorum(status: ClusterStatus) -> str:
    if status.zookeeper:
        return section(
            "Controller quorum",
            f"<p>The metadata is kept in ZooKeeper ({esc(status.zookeeper)}).</p>",
        )
    if status.quorum is None:
        return section(
            "Controller quorum",
            f'<p class="notice error">Cannot describe the quorum: {esc(status.quorum_error)}</p>',
        )
    quorum = status.quorum
    rows = (
        (
            str(m.node_id),
            m.role.value,
            m.address or "-",
            "-" if m.log_end_offset is None else str(m.log_end_offset),
            "-" if m.lag is None else str(m.lag),
            format_ago(m.last_contact_ago_ms),
        )
        for m in quorum.members
    )
    heading = (
        f"<p>Leader {esc(quorum.leader_id if quorum.leader_id is not None else '-')}, epoch "
        f"{quorum.leader_epoch}, high watermark {quorum.high_watermark}</p>"
    )
    return section(
        "Controller quorum",
        heading
        + table(
            ("Node", "Role", "Address", "Log end", "Lag", "Last contact"), rows, label="Quorum"
        ),
    )


# --- topics ------------------------------------------------------------------------------


def topics_body(topics: Sequence[TopicSummary], show_internal: bool) -> str:
    shown = [t for t in topics if show_internal or not t.internal]
    rows = (
        (
            link(f"/topics/{path_part(t.name)}", t.name),
            str(t.partitions),
            str(t.replication_factor),
            str(t.under_replicated),
            str(t.offline),
            esc(_size(t.size)),
        )
        for t in shown
    )
    listing = table(
        ("Topic", "Partitions", "Replicas", "Under-replicated", "Offline", "Size"),
        rows,
        raw=True,
        label="Topics",
        empty="No topics yet.",
    )
    toggle = (
        link("/topics", "Hide internal topics")
        if show_internal
        else link("/topics?internal=1", "Show internal topics")
    )
    create = form(
        "/topics",
        field("Name", "name", extra="required")
        + field(
            "Partitions", "partitions", "", kind="number", extra='min="1" placeholder="default"'
        )
        + field(
            "Replication factor",
            "replication_factor",
            "",
            kind="number",
            extra='min="1" placeholder="default"',
        )
        + textarea("Configs (key=value per line)", "configs"),
        "Create topic",
        name="Create topic",
    )
    return section("Topics", f"<p>{toggle}</p>{listing}") + section("New topic", create)


def topic_body(topic: TopicDetail) -> str:
    name = path_part(topic.name)
    rows = (
        (
            str(p.partition),
            str(p.leader) if p.leader >= 0 else "none",
            _ids(p.replicas),
            _ids(p.isr) + (" (under-replicated)" if p.under_replicated else ""),
            "-" if p.earliest is None else str(p.earliest),
            "-" if p.latest is None else str(p.latest),
            ", ".join(f"{b}: {format_bytes(s)}" for b, s in sorted(p.sizes.items())) or "-",
        )
        for p in topic.partitions
    )
    partitions = table(
        ("Partition", "Leader", "Replicas", "In sync", "First offset", "End offset", "Size"),
        rows,
        label="Partitions",
    )
    actions = form(
        f"/topics/{name}/partitions",
        field(
            "New partition count",
            "count",
            len(topic.partitions) + 1,
            kind="number",
            extra=f'min="{len(topic.partitions) + 1}"',
        ),
        "Add partitions",
        name="Add partitions",
    ) + form(
        f"/topics/{name}/delete",
        field("Type the topic's name to delete it", "confirm", extra="required"),
        "Delete topic",
        name="Delete topic",
        danger=True,
    )
    browse = link(f"/topics/{name}/messages", "Browse and search messages")
    return (
        f"<p>{browse}</p>"
        + section("Partitions", partitions)
        + section("Configs", configs_table(topic.configs, name))
        + section("Actions", actions)
    )


def configs_table(configs: Sequence[ConfigValue], name: str) -> str:
    rows = (
        (
            f"<strong>{esc(c.name)}</strong>" if not c.default else esc(c.name),
            "(sensitive)" if c.sensitive else esc(c.value if c.value is not None else "null"),
            esc(c.source),
            "" if c.default or c.read_only else _reset_button(name, c.name),
        )
        for c in configs
    )
    edit = form(
        f"/topics/{name}/configs",
        field("Key", "key", extra="required") + field("Value", "value"),
        "Set config",
        name="Set config",
    )
    return (
        table(("Key", "Value", "Source", ""), rows, raw=True, label="Configs")
        + "<p>Keys in bold are set on this topic; the others are defaults.</p>"
        + edit
    )


def _reset_button(topic: str, key: str) -> str:
    return (
        f'<form method="post" action="/topics/{topic}/configs" class="inline">'
        f'<input type="hidden" name="key" value="{esc(key)}">'
        '<input type="hidden" name="reset" value="1"><button>Use default</button></form>'
    )


# --- messages ----------------------------------------------------------------------------


def messages_body(
    topic: str, partitions: int, query: BrowseQuery | None, search: Search | None
) -> str:
    name = path_part(topic)
    q = query or BrowseQuery.parse({})  # an empty form shows the defaults
    chosen = "all" if q.partition is None else str(q.partition)
    options = [("all", "All")] + [(str(p), str(p)) for p in range(partitions)]
    controls = (
        select("Partition", "partition", options, chosen)
        + select(
            "Start",
            "start",
            [
                (Start.NEWEST.value, "Newest records"),
                (Start.EARLIEST.value, "Earliest"),
                (Start.OFFSET.value, "At an offset"),
                (Start.TIME.value, "At a time"),
            ],
            q.start.value,
        )
        + field("Offset", "offset", q.offset, kind="number", extra='min="0"')
        + field("Time (UTC, or ms)", "time", "", extra='placeholder="2026-11-28T09:30:00Z"')
        + field("Search", "search", q.text, extra='placeholder="text in key or value"')
        + select(
            "In",
            "in",
            [
                (SearchIn.BOTH.value, "Key or value"),
                (SearchIn.KEY.value, "Key"),
                (SearchIn.VALUE.value, "Value"),
            ],
            q.matcher.where.value,
        )
        + _checkbox("Regular expression", "regex", q.regex)
        + select(
            "Show as",
            "format",
            [(f.value, f.value.upper() if f is not Format.TEXT else "Text") for f in Format],
            q.fmt.value,
        )
        + field("Matches", "limit", q.limit, kind="number", extra='min="1" max="1000"')
        + field("Read at most", "scan", q.scan, kind="number", extra='min="1"')
    )
    browse = form(
        f"/topics/{name}/messages", controls, "Search", method="get", name="Search messages"
    )
    results = (
        f'<div id="results" data-search="{esc(search.id)}">{search_results(search)}</div>'
        if search is not None
        else '<div id="results"></div>'
    )
    produce = form(
        f"/topics/{name}/produce",
        select("Partition", "partition", [("any", "Any"), *options[1:]], "any")
        + field("Key", "key")
        + textarea("Value", "value")
        + textarea("Headers (name: value per line)", "headers", rows=2),
        "Produce record",
        name="Produce record",
    )
    return (
        f"<p>{link(f'/topics/{name}', f'Back to {topic}')}</p>"
        + section("Find records", browse + results)
        + section("Produce a test record", produce)
    )


def _checkbox(label: str, name: str, checked: bool) -> str:
    mark = " checked" if checked else ""
    return f'<label><input type="checkbox" name="{name}" value="1"{mark}> {esc(label)}</label>'


def search_results(search: Search) -> str:
    state = "done" if search.done else "running"
    kind = "notice error" if search.error else "progress"
    status = f'<p class="{kind}" data-state="{state}" role="status">{esc(search.summary())}</p>'
    if search.total and not search.done:
        status += f'<progress max="{search.total}" value="{search.scanned}"></progress>'
    if search.error or not search.done:
        return status
    fmt = search.query.fmt
    rows = (
        tuple(
            f"<pre>{esc(cell)}</pre>" if i >= 3 else esc(cell)
            for i, cell in enumerate(r.cells(fmt))
        )
        for r in search.records
    )
    found = table(
        ("Partition", "Offset", "Timestamp", "Key", "Value", "Headers"),
        rows,
        raw=True,
        label="Records",
        empty="No record matched.",
    )
    return status + found
