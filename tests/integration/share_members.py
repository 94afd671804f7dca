"""Run share-group members (`share_member.py`) as child processes and follow what each
one reports: the records it got, with their delivery counts, and the acknowledgements the
broker confirmed."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from group_members import MemberProcess

from strom.client import KafkaConnection

MEMBER_SCRIPT = Path(__file__).with_name("share_member.py")
ACCEPT, RELEASE, REJECT = 1, 2, 3
SHARE_GROUP_DESCRIBE = 77


class ShareMember(MemberProcess):
    """One `share_member.py` process."""

    def __init__(self, bootstrap: str, group: str, topic: str, **rules: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), bootstrap, group, topic, json.dumps(rules)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.got: list[tuple[int, int, str, int]] = []
        """(partition, offset, value, delivery count) of every record delivered, in order."""
        self.acked: list[tuple[int, int, int]] = []
        """(partition, offset, acknowledge type) the broker confirmed."""
        self.errors: list[str] = []
        self.timeline: list[tuple[str, int, int, int]] = []
        """("got", partition, offset, delivery count) and ("acked", partition, offset,
        type) in the order the member reported them."""
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self._lock:
                if "got" in event:
                    partition, offset, value, count = event["got"]
                    self.got.append((partition, offset, value, count))
                    self.timeline.append(("got", partition, offset, count))
                elif "acked" in event:
                    for partition, offset, kind in event["acked"]:
                        self.acked.append((partition, offset, kind))
                        self.timeline.append(("acked", partition, offset, kind))
                elif "error" in event or "commit_failed" in event:
                    self.errors.append(event.get("error") or event["commit_failed"])

    def snapshot(self) -> tuple[list[tuple[int, int, str, int]], list[tuple[int, int, int]]]:
        with self._lock:
            return list(self.got), list(self.acked)


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Group configs (resource type 32) through the admin client, before anyone joins."""
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def story(members: list[ShareMember]) -> str:
    lines = []
    for i, member in enumerate(members):
        got, acked = member.snapshot()
        lines.append(
            f"member {i}: alive {member.alive}, {len(got)} got (last {got[-3:]}), "
            f"{len(acked)} acked, errors {member.errors[-3:]}"
        )
    return "\n".join(lines)


def assigned_members(bootstrap: str, group: str) -> int:
    """How many members of the share group hold an assignment (ShareGroupDescribe v1)."""

    async def ask() -> int:
        host, port = bootstrap.rsplit(":", 1)
        connection = await KafkaConnection.connect(host, int(port), client_id="share-test")
        try:
            response = await connection.request(
                SHARE_GROUP_DESCRIBE,
                1,
                {"group_ids": [group], "include_authorized_operations": False},
            )
        finally:
            connection.close()
        described = response.groups[0]
        if described.error_code != 0:
            return 0
        return sum(1 for m in described.members if m.assignment.topic_partitions)

    return asyncio.run(ask())
