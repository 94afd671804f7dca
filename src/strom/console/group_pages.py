"""The consumer group and security pages, rendered from plain values."""

from __future__ import annotations

from collections.abc import Sequence

from strom.cli.group_model import format_assignment, member_partitions, state_name
from strom.console.groups import GroupDetail, GroupSummary, SecurityView
from strom.console.html import esc, field, form, link, path_part, section, select, table


def groups_body(groups: Sequence[GroupSummary]) -> str:
    rows = (
        (
            link(f"/groups/{path_part(g.group_id)}", g.group_id),
            esc(g.kind),
            esc(g.state),
            "-" if g.members is None else str(g.members),
            "-" if g.lag is None else str(g.lag),
        )
        for g in groups
    )
    return section(
        "Groups",
        table(
            ("Group", "Type", "State", "Members", "Lag"),
            rows,
            raw=True,
            label="Groups",
            empty="No groups.",
        ),
    )


def group_body(group: str, detail: GroupDetail) -> str:
    description = detail.description
    node = description.coordinator
    facts = (
        f"<p>State <strong>{esc(state_name(description.state))}</strong>, assignor "
        f"{esc(description.partition_assignor or '-')}, coordinator "
        f"{esc(f'{node.id} ({node.host}:{node.port})' if node is not None else '-')}, "
        f"total lag {esc('-' if detail.lag is None else detail.lag)}</p>"
    )
    members = table(
        ("Member", "Client id", "Host", "Instance id", "Partitions"),
        (
            (
                m.member_id,
                m.client_id,
                m.host,
                m.group_instance_id or "-",
                format_assignment(member_partitions(m)),
            )
            for m in description.members
        ),
        label="Members",
        empty="No active members.",
    )
    progress = table(
        ("Topic", "Partition", "Committed", "Log end", "Lag", "Member"),
        (p.row() for p in detail.progress),
        label="Lag",
        empty="No committed offsets.",
    )
    if description.members:
        reset = "<p>Offsets can be reset once the group has no members.</p>"
    else:
        reset = form(
            f"/groups/{path_part(group)}/reset",
            field("Topic (empty: every partition with an offset)", "topic")
            + select(
                "To",
                "to",
                [
                    ("earliest", "Earliest"),
                    ("latest", "Latest"),
                    ("offset", "Offset"),
                    ("datetime", "Date and time"),
                ],
                "earliest",
            )
            + field("Offset or date and time", "value"),
            "Reset offsets",
            name="Reset offsets",
        )
    return (
        facts
        + section("Members", members)
        + section("Partitions", progress)
        + section("Reset offsets", reset)
    )


def security_body(view: SecurityView) -> str:
    if view.acls is None:
        acls = f'<p class="notice error">Cannot list ACLs: {esc(view.acl_problem)}</p>'
    else:
        acls = table(
            ("Resource", "Pattern", "Name", "Principal", "Host", "Operation", "Permission"),
            view.acls,
            label="ACLs",
            empty="No ACLs.",
        )
    if view.users is None:
        users = f'<p class="notice error">Cannot list SCRAM users: {esc(view.user_problem)}</p>'
    else:
        users = table(("User", "Credentials"), view.users, label="Users", empty="No SCRAM users.")
    return section("ACLs", acls) + section("SCRAM users", users)
