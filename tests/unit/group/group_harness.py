"""A manual-clock driver for the pure group coordinator: no sockets, no sleeps.

It plays the shell: each decision's records are "written" and reported durable at once,
unless `hold` is set; then they wait in `held` until `complete(write_id)` or
`fail(write_id)`. Replies are delivered when the core promotes a write; requests the
core gives up on (a failed write) are answered `FAILED`."""

from __future__ import annotations

from random import Random
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group import offsets
from strom.group.coordinator import (
    GroupCoordinator,
    JoinRequest,
    LeavingMember,
    Output,
    RebalanceResult,
    Reply,
    SyncRequest,
)
from strom.group.records import Key, Value
from strom.group.state import GroupConfig, GroupState, JoinResult, SyncResult

PROTOCOLS = (("range", b"range-meta"), ("roundrobin", b"rr-meta"))


class Harness:
    def __init__(self, seed: int = 1, **config: Any) -> None:
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.core = GroupCoordinator(GroupConfig(**config), Random(seed))
        self.now_ms = 1_000_000
        self.replies: dict[int, Reply] = {}
        self.records: list[tuple[Key, Value | None]] = []
        """The records of every committed write, in the order they were committed."""
        self.failed_tokens: set[int] = set()
        self.hold = False
        self.held: list[int] = []
        self.last_write_id = 0
        self._outputs: dict[int, Output] = {}
        self._next = 0

    def _apply(self, out: Output) -> None:
        self._outputs[out.write_id] = out
        self.last_write_id = out.write_id
        if self.hold and out.records:
            self.held.append(out.write_id)
        else:
            self.complete(out.write_id)

    def run(self, out: Output) -> Output:
        """Carry out a decision made by calling the core directly."""
        self._apply(out)
        return out

    def complete(self, write_id: int) -> None:
        """The write's records are durable."""
        if write_id in self.held:
            self.held.remove(write_id)
        for promoted in self.core.durable(write_id):
            out = self._outputs.pop(promoted)
            self.records += out.records  # a group's writes are promoted in log order
            for token, reply in out.replies:
                assert token not in self.replies, f"token {token} answered twice"
                self.replies[token] = reply

    def fail(self, write_id: int) -> tuple[int, ...]:
        """The write failed: returns the writes the core discarded."""
        if write_id in self.held:
            self.held.remove(write_id)
        discarded = self.core.failed(write_id)
        for each in discarded.write_ids:
            self._outputs.pop(each, None)
            if each in self.held:
                self.held.remove(each)
        assert not self.failed_tokens & discarded.tokens, "a request failed twice"
        assert not self.replies.keys() & discarded.tokens, "an answered request failed"
        self.failed_tokens |= discarded.tokens
        return discarded.write_ids

    def _token(self) -> int:
        self._next += 1
        return self._next

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        client_id: str = "client",
    ) -> int:
        token = self._token()
        request = JoinRequest(
            group,
            member_id,
            instance,
            "consumer",
            protocols,
            session_ms,
            rebalance_ms,
            client_id=client_id,
            client_host="/127.0.0.1",
        )
        self._apply(self.core.join(request, token, self.now_ms))
        return token

    def join_new(self, **kwargs: Any) -> tuple[str, int]:
        """A dynamic member's two-step join: returns (member id, token of the 2nd join)."""
        first = self.join(**kwargs)
        result = self.joined(first)
        assert result.error.name == "member_id_required", result
        return result.member_id, self.join(result.member_id, **kwargs)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> int:
        token = self._token()
        request = SyncRequest(
            group, member_id, instance, generation, assignments=tuple((assignments or {}).items())
        )
        self._apply(self.core.sync(request, token, self.now_ms))
        return token

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> Any:
        error, out = self.core.heartbeat(group, member_id, instance, generation, self.now_ms)
        self._apply(out)
        return error

    def leave(self, *members: LeavingMember, group: str = "g") -> Any:
        error, errors, out = self.core.leave(group, members, self.now_ms)
        self._apply(out)
        return error, errors

    def rebalance(self, group: str = "g", reason: str = "test") -> RebalanceResult:
        result, out = self.core.rebalance(group, self.now_ms, reason)
        self._apply(out)
        return result

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self._apply(self.core.tick(self.now_ms))

    def commit(self, request: offsets.CommitRequest) -> list[ErrorCode]:
        errors, out = offsets.commit(self.core, request, self.now_ms)
        self._apply(out)
        return errors

    def joined(self, token: int) -> JoinResult:
        reply = self.replies.get(token)
        assert isinstance(reply, JoinResult), f"no JoinGroup answer for token {token}"
        return reply

    def synced(self, token: int) -> SyncResult:
        reply = self.replies.get(token)
        assert isinstance(reply, SyncResult), f"no SyncGroup answer for token {token}"
        return reply

    def group(self, group_id: str = "g") -> Any:
        return self.core.groups[group_id]


def stable_group(h: Harness, count: int) -> tuple[list[str], int]:
    """`count` dynamic members in a Stable group; returns (member ids, generation)."""
    ids: list[str] = []
    tokens: list[int] = []
    for _ in range(count):
        member_id, token = h.join_new()
        ids.append(member_id)
        tokens.append(token)
        # Members already in the group must rejoin for the new one to get in.
        for i, other in enumerate(ids[:-1]):
            if tokens[i] in h.replies:
                tokens[i] = h.join(other)
    results = [h.joined(t) for t in tokens]
    generation = results[0].generation_id
    assert all(r.error is ErrorCode.none and r.generation_id == generation for r in results)
    leader = results[0].leader_id
    syncs = [
        h.sync(m, generation, {m: m.encode() for m in ids} if m == leader else None) for m in ids
    ]
    assert all(h.synced(s).error is ErrorCode.none for s in syncs)
    assert h.group().state is GroupState.STABLE
    return ids, generation
