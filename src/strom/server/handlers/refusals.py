"""What a request the authorizer refuses, in whole or in part, is told, and how the part
it allows goes on: the admin, config and cluster handlers' shared pieces.

Kafka's words: the default text of each authorization error (what `new ApiError(code)`
carries), and the message of a cluster check that fails (AuthHelper's
authorizeClusterOperation: "Request … is not authorized."; clients do not parse it).

A request some of whose entries are refused (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs) goes on with only the others: `answer_each`
answers the refused entries here and asks for the rest, then puts the answers back in
the request's order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from strom.protocol.codec import Request

__all__ = [
    "CLUSTER_DENIED",
    "GROUP_DENIED",
    "TOPIC_DENIED",
    "answer_each",
    "in_process",
    "not_authorized",
]

TOPIC_DENIED = "Topic authorization failed."
GROUP_DENIED = "Group authorization failed."
CLUSTER_DENIED = "Cluster authorization failed."

T = TypeVar("T")


def not_authorized(request: Request) -> str:
    """The message of a refused cluster operation, naming the request and who sent it."""
    host = request.client_host or "an unknown host"
    return (
        f"Request {request.api_key.name} v{request.api_version} (correlation id "
        f"{request.correlation_id}) of {request.principal} from {host} is not authorized."
    )


def in_process(request: Request) -> bool:
    """Whether this node made `request` itself and answers it in process (no listener:
    its controller link's own calls, controller_link.ControllerCaller), rather than a
    peer sending it on a connection. Only the latter is a principal's to authorize."""
    return not request.listener


async def answer_each(
    request: Request,
    field: str,
    refusals: Sequence[T | None],
    allowed: Callable[[Request], Awaitable[Sequence[T]]],
) -> list[T]:
    """One answer per entry of the request body's list `field`, in the request's order:
    its refusal where it has one, else what `allowed` answers for the same request with
    only the entries without one (asked only if there are any, and answering each of
    them, in order)."""
    entries = getattr(request.body, field)
    kept = tuple(entry for entry, refusal in zip(entries, refusals, strict=True) if refusal is None)
    answers: Sequence[T] = ()
    if kept:
        answers = await allowed(replace(request, body=replace(request.body, **{field: kept})))
    if len(answers) != len(kept):
        raise ValueError(f"{len(answers)} answers for {len(kept)} {field} of {request.api_key}")
    given = iter(answers)
    return [next(given) if refusal is None else refusal for refusal in refusals]
