"""Carrying out the writes of a pure group core with pending writes (KIP-848 consumer
groups, KIP-932 share groups: `strom.group.pending`) on the event loop.

A decision's records are written with `GroupService.append_and_wait` (the one way to
`__consumer_offsets`); then the core is told `durable(write_id)` and the caller goes on
(its member gets its answer). If the write fails the core is told `failed(write_id)`:
the group is as before it, and the later writes of the group, decided on it, are
dropped too: each of their callers gets the coordinator error Kafka gives. A decision
that wrote nothing waits for the group's write it read (`after_write_id`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.group.requests import Output
from strom.server.group_storage import COORDINATOR_ERRORS, StorageError
from strom.server.groups import CoordinatorUnavailable, GroupService

__all__ = ["CoreWrites", "with_group_timeouts"]

log = logging.getLogger(__name__)


class _PendingCore(Protocol):
    def durable(self, write_id: int) -> None: ...

    def failed(self, write_id: int) -> list[int]: ...


class CoreWrites:
    """The writes of one core in flight. Ports: the group service that writes, the
    core told of each outcome, and what its groups are called in the log."""

    def __init__(self, groups: GroupService, core: _PendingCore, kind: str) -> None:
        self._groups = groups
        self._core = core
        self._kind = kind
        self._writes: dict[int, asyncio.Future[None]] = {}
        self._doomed: set[int] = set()

    async def carry_out(
        self,
        group_id: str,
        records: Sequence[Any],
        write_id: int,
        after_write_id: int,
        *,
        classic: Output | None = None,
        classic_first: bool = True,
    ) -> None:
        """Write a decision's records (write `write_id`) and return once they are durable;
        with no records, once write `after_write_id` is. Raises CoordinatorUnavailable.
        `classic`: a decision of the classic core written in the same batch, before or
        after these records (a group moving between the protocols); the two cores hear
        the same outcome."""
        if not records:
            waiting = self._writes.get(after_write_id)
            if waiting is not None:
                await asyncio.shield(waiting)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._writes[write_id] = done
        try:
            if classic is None:
                await self._groups.append_and_wait(records)
            elif classic_first:
                await self._groups.apply(classic, after=records)
            else:
                await self._groups.apply(classic, before=records)
        except StorageError as exc:
            error = COORDINATOR_ERRORS.get(exc.error_code, exc.error_code)
            log.error("cannot write %s group %s: %s", self._kind, group_id, exc)
            self._fail(write_id, error)
        except CoordinatorUnavailable as exc:
            log.error("cannot write %s group %s: %s", self._kind, group_id, exc)
            self._fail(write_id, exc.error_code)
        except BaseException:
            self._fail(write_id, ErrorCode.not_coordinator)
            raise
        else:
            if write_id in self._doomed:
                self._fail(write_id, ErrorCode.not_coordinator)
            else:
                self._core.durable(write_id)
                done.set_result(None)
        finally:
            self._writes.pop(write_id, None)
            self._doomed.discard(write_id)
        await done

    def _fail(self, write_id: int, error: ErrorCode) -> None:
        for dropped in self._core.failed(write_id) or [write_id]:
            self._doomed.add(dropped)
            future = self._writes.get(dropped)
            if future is not None and not future.done():
                future.set_exception(CoordinatorUnavailable(error, "group state not written"))


class _Timeouts(Protocol):
    @property
    def session_timeout_ms(self) -> int: ...
    @property
    def heartbeat_interval_ms(self) -> int: ...


C = TypeVar("C", bound=_Timeouts)


def with_group_timeouts(config: C, own: Mapping[str, str], prefix: str) -> C:
    """A coordinator's settings with a group's own `<prefix>.session.timeout.ms` and
    `<prefix>.heartbeat.interval.ms` (config resource GROUP; `prefix` "consumer" or
    "share"), where it has them: they were checked against the broker's bounds when set."""
    session = own.get(f"{prefix}.session.timeout.ms")
    interval = own.get(f"{prefix}.heartbeat.interval.ms")
    if session is None and interval is None:
        return config
    return dataclasses.replace(  # type: ignore[type-var]
        config,
        session_timeout_ms=int(session) if session is not None else config.session_timeout_ms,
        heartbeat_interval_ms=(
            int(interval) if interval is not None else config.heartbeat_interval_ms
        ),
    )
