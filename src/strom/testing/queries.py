"""What a test asks a `StromCluster` about its topics, leaders and groups, and waits for.

Answers come over the Kafka protocol from the running nodes (strom.testing.admin), past
the test network, so a cut never hides them; a partition's leader is the newest one any
running node reports.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.client import ClientError, NodeClient
from strom.testing import admin
from strom.testing.node import InProcessNode, TestNode

T = TypeVar("T")

POLL_S = 0.02


class ClusterError(RuntimeError):
    """A fault or a wait could not be carried out; the message says why."""


class ClusterQueries(ABC):
    size: int

    @abstractmethod
    def is_running(self, node_id: int) -> bool: ...

    @abstractmethod
    def _node(self, node_id: int) -> TestNode: ...

    @abstractmethod
    def _running_clients(self) -> dict[int, NodeClient]: ...

    @abstractmethod
    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T: ...

    # --- leaders and groups ----------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str | int | bool] | None = None,
    ) -> None:
        """Create a topic and wait until every partition has a leader."""
        rf = replication_factor or min(3, self.size)
        configs = {k: config_text(v) for k, v in (config or {}).items()}
        self._ask(lambda c: admin.create_topic(c, name, partitions, rf, configs))
        for index in range(partitions):
            self.wait_for_leader(name, index)

    def leader(self, topic: str, partition: int = 0) -> int | None:
        """The partition's leader as the running nodes see it (the newest view of
        those that answer); None while it has none."""
        state = self._partition(topic, partition)
        return None if state is None or state.leader_id < 0 else state.leader_id

    def replicas(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        state = self._partition(topic, partition)
        return () if state is None else state.replicas

    def isr(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        state = self._partition(topic, partition)
        return () if state is None else state.isr

    def wait_for_leader(
        self,
        topic: str,
        partition: int = 0,
        *,
        not_on: int | None = None,
        on: int | None = None,
        timeout_s: float = 30.0,
    ) -> int:
        """Wait until the partition has a running leader (other than `not_on`, or
        `on` itself); the leader's id."""

        last: list[admin.PartitionStatus | None] = [None]

        def settled() -> int | None:
            last[0] = state = self._partition(topic, partition)
            leader = None if state is None or state.leader_id < 0 else state.leader_id
            if leader is None or not self.is_running(leader) or leader == not_on:
                return None
            return leader if on in (None, leader) else None

        def seen() -> str:
            state = last[0]
            if state is None:
                return "no running node knows the partition"
            if state.leader_id < 0:
                leader = "none"
            else:
                running = "" if self.is_running(state.leader_id) else " (not running)"
                leader = f"node {state.leader_id}{running}"
            return f"leader {leader}, epoch {state.leader_epoch}, ISR {list(state.isr)}"

        target = "" if on is None else f" on node {on}"
        target += "" if not_on is None else f" other than node {not_on}"
        return self.wait_until(
            settled, timeout_s, f"a leader for {topic}-{partition}{target}", seen=seen
        )

    def move_leader(self, topic: str, partition: int, to: int, *, timeout_s: float = 30.0) -> None:
        """Make node `to` (a replica in the ISR) lead the partition now: it becomes the
        preferred replica, then a preferred leader election (ElectLeaders) runs."""
        replicas = self.replicas(topic, partition)
        if to not in replicas:
            raise ClusterError(f"node {to} is not a replica of {topic}-{partition}: {replicas}")
        if replicas[0] != to:
            order = [to, *(r for r in replicas if r != to)]
            self._ask(lambda c: admin.reassign(c, topic, partition, order))
            self.wait_until(
                lambda: self.replicas(topic, partition)[:1] == (to,) or None,
                timeout_s,
                f"node {to} to become the preferred replica of {topic}-{partition}",
            )

        def elected() -> bool | None:
            error = self._ask(lambda c: admin.elect_preferred(c, topic, partition))
            if error in (ErrorCode.none, ErrorCode.election_not_needed):
                return True
            return None

        self.wait_until(elected, timeout_s, f"an election of node {to} for {topic}-{partition}")
        self.wait_for_leader(topic, partition, on=to, timeout_s=timeout_s)

    def group(self, group_id: str) -> admin.GroupStatus | None:
        """The consumer group as its coordinator describes it (None if unknown)."""

        async def ask() -> admin.GroupStatus | None:
            return await admin.group(self._running_clients(), group_id)

        return self._run(ask())

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """The offsets the group has committed, by (topic, partition); empty when it has
        committed none (or no coordinator can say yet)."""

        async def ask() -> dict[tuple[str, int], int] | None:
            return await admin.committed(self._running_clients(), group_id)

        return self._run(ask()) or {}

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's latest offset, as its leader answers ListOffsets: the high
        watermark, which consumers read up to (and commit, once they have read all)."""
        partitions = self._ask(lambda c: admin.partitions(c, topic))
        if partitions is None:
            raise ClusterError(f"no topic {topic!r}")
        return {p: self._end_offset(topic, p) for p in sorted(partitions)}

    def _end_offset(self, topic: str, partition: int, timeout_s: float = 30.0) -> int:
        def ask() -> tuple[int] | None:
            leader = self.leader(topic, partition)
            client = None if leader is None else self._running_clients().get(leader)
            if client is None:
                return None
            try:
                offset = self._run(admin.end_offset(client, topic, partition))
            except ClientError:
                return None
            return None if offset is None else (offset,)

        what = f"the end offset of {topic}-{partition} from its leader"
        return self.wait_until(ask, timeout_s, what)[0]

    def wait_for_group(
        self,
        group_id: str,
        *,
        state: str = "Stable",
        members: int | None = None,
        timeout_s: float = 30.0,
    ) -> admin.GroupStatus:
        """Wait until the group is in `state` (with `members` members, if given)."""

        last: list[admin.GroupStatus | None] = [None]

        def reached() -> admin.GroupStatus | None:
            last[0] = found = self.group(group_id)
            if found is None or found.state != state:
                return None
            return found if members in (None, len(found.members)) else None

        def seen() -> str:
            found = last[0]
            if found is None:
                return "no coordinator knows the group"
            return f"{found.state} with {len(found.members)} members"

        what = f"group {group_id!r} to be {state}" + (
            f" with {members} members" if members is not None else ""
        )
        return self.wait_until(reached, timeout_s, what, seen=seen)

    def rebalance(self, group_id: str, *, timeout_s: float = 10.0) -> None:
        """Make the group's coordinator start a rebalance now, as a membership change
        does: members are told REBALANCE_IN_PROGRESS and join again (in-process only)."""
        found = self.group(group_id)
        if found is None:
            raise ClusterError(f"no coordinator knows group {group_id!r}")
        node = self._node(found.coordinator_id)
        if not isinstance(node, InProcessNode):
            raise ClusterError("rebalance() needs in-process nodes (processes=False)")
        result = node.call(
            lambda broker: broker.groups.rebalance(group_id, "asked by the test"), timeout_s
        )
        if result.error != ErrorCode.none:
            raise ClusterError(f"rebalancing group {group_id!r}: {result.error.name.upper()}")
        if not result.started:
            state = "unknown" if result.state is None else result.state.name
            raise ClusterError(f"group {group_id!r} cannot rebalance now: it is {state}")

    # --- waiting ---------------------------------------------------------------------

    def wait_until(
        self,
        check: Callable[[], T | None],
        timeout_s: float,
        what: str,
        *,
        seen: Callable[[], str] | None = None,
    ) -> T:
        """Poll `check` until it returns something true; that. (0, an empty list and
        None mean "not yet", as in an `if`.) On a timeout the error names `what` and,
        when given, what `seen()` says the cluster looked like last."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() >= deadline:
                last = "" if seen is None else f"; last seen: {seen()}"
                raise ClusterError(f"gave up after {timeout_s:g} s waiting for {what}{last}")
            time.sleep(POLL_S)

    async def wait_for_leader_async(self, topic: str, partition: int = 0, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.wait_for_leader, topic, partition, **kwargs)

    async def wait_for_group_async(self, group_id: str, **kwargs: Any) -> admin.GroupStatus:
        return await asyncio.to_thread(self.wait_for_group, group_id, **kwargs)

    def _partition(self, topic: str, partition: int) -> admin.PartitionStatus | None:
        async def newest() -> admin.PartitionStatus | None:
            best: admin.PartitionStatus | None = None
            for client in self._running_clients().values():
                try:
                    seen = await admin.partitions(client, topic)
                except ClientError:
                    continue
                state = None if seen is None else seen.get(partition)
                if state is not None and (best is None or state.leader_epoch > best.leader_epoch):
                    best = state
            return best

        return self._run(newest())

    def _ask(self, call: Callable[[NodeClient], Coroutine[Any, Any, T]]) -> T:
        """`call` on the first running node that answers."""

        async def ask() -> T:
            last: Exception | None = None
            for client in self._running_clients().values():
                try:
                    return await call(client)
                except ClientError as exc:
                    last = exc
            raise ClusterError(f"no running node answered: {last}")

        return self._run(ask())


def config_text(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
