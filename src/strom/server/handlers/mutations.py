"""`controller_mutation_rate` where topic changes are decided: at the active controller,
for a client's CreateTopics, CreatePartitions and DeleteTopics (a node's own, such as
`__consumer_offsets`, is not counted), as Kafka's controller counts them (KIP-599).

Each change counts the partitions it creates or deletes, once it is known to be valid:
the handler previews the decision and passes those counts (None for a change the
decision will refuse anyway, which costs nothing). A change the quota refuses is
answered THROTTLING_QUOTA_EXCEEDED without reaching the decision; the others are decided
together; every answer carries the client's wait in `throttle_time_ms`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from kio.schema.errors import ErrorCode

from strom.protocol.codec import Request
from strom.server.handlers.ports import AdminContext

__all__ = ["THROTTLED", "paced"]

THROTTLED = "The throttling quota has been exceeded."
"""Kafka's message with THROTTLING_QUOTA_EXCEEDED."""
THROTTLED_CODE = ErrorCode.throttling_quota_exceeded

R = TypeVar("R")


def counted(context: AdminContext, request: Request) -> bool:
    """Whether the request's changes count against a client's quota here."""
    quota = context.mutation_quota
    return quota is not None and bool(request.listener) and quota.active()


async def paced(
    context: AdminContext,
    request: Request,
    permits: Sequence[int | None],
    decide: Callable[[list[int]], Awaitable[list[R]]],
    refused: Callable[[int], R],
) -> tuple[list[R], int]:
    """(one answer per change, in order; the client's wait in ms). `decide(indexes)`
    answers the changes at `indexes`, in that order; `refused(index)` is the answer to
    one the quota refuses."""
    quota = context.mutation_quota
    if quota is None or not counted(context, request):
        return await decide(list(range(len(permits)))), 0
    admitted = quota.admit(request, permits)
    kept = [index for index, ok in enumerate(admitted) if ok]
    answers = iter(await decide(kept) if kept else [])
    results = [next(answers) if ok else refused(i) for i, ok in enumerate(admitted)]
    return results, quota.throttle_ms(request)
