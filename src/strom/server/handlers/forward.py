"""Admin requests run at the active controller, whichever broker a client sent them to.

On the active controller they run in place. Any other broker forwards the client's
request in a FORWARD envelope to the controller listener of the active controller, waits
until its own metadata has reached the offset the controller answered at (so the client
sees its change on this broker at once), and relays the answer. While there is no active
controller (an election is under way), or the node it believes active says it is not
(yet), it retries for a while, then answers NOT_CONTROLLER, which Kafka clients retry.
A client's request is checked twice, as in Kafka: by the broker it reached (the caller),
and again at the controller, against the controller's own ACLs, as the same principal from
the same host (FORWARD carries both: server/private.py). The second check is the one
that counts when an ACL was just removed and the broker has not heard yet. A client's
request on a controller listener, or forwarded to one, is that controller's own: it runs
there when it is the active one, and is answered NOT_CONTROLLER otherwise, as Kafka's
controllers answer. A node's own request (a topic it auto-creates) is forwarded without
a principal and runs unchecked.

A caller passes its handlers' context, which carries the node's `ForwardPort` as
`forward` (handlers/ports.py); the request's own work, `handle(context, request)`, gets
that same context when it runs on this node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.protocol.codec import Request, decode_response, encode_request
from strom.server.controller import NotController
from strom.server.handlers.ports import Forwarding
from strom.server.private import (
    FORWARD_NOT_CONTROLLER,
    FORWARDED_LISTENER,
    ForwardedRequest,
    PrivateApi,
    PrivatePayloadError,
    decode_forward_response,
    encode_forward_request,
)

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 15.0
CATCH_UP_TIMEOUT_S = 5.0
RETRY_S = 0.1

C = TypeVar("C", bound=Forwarding)
"""The caller's context: its `forward` port says how to reach the controller."""
ErrorResponse = Callable[[Request, ErrorCode, str], Any]


async def at_controller(
    context: C,
    request: Request,
    handle: Callable[[C, Request], Awaitable[Any]],
    error_response: ErrorResponse,
) -> Any:
    """`handle(context, request)` on the active controller; its response body."""
    port = context.forward
    if request.listener == FORWARDED_LISTENER or request.listener in port.controller_listeners:
        # Checked by the caller, on this controller: not forwarded again.
        return await on_this_controller(context, request, handle, error_response)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FORWARD_TIMEOUT_S
    frame = encode_request(
        request.api_key, request.api_version, request.correlation_id, request.body
    )[4:]
    forwarded = ForwardedRequest(frame)
    if request.listener:  # a client's: the controller checks it again, as its principal
        forwarded = ForwardedRequest(frame, request.principal, request.client_host)
    payload = encode_forward_request(forwarded)
    while True:
        try:
            if port.channel.local_controller_active:
                return await handle(context, request)
            answer = await port.channel.raw_request(
                PrivateApi.FORWARD, forwarded.version, payload, timeout_s=FORWARD_TIMEOUT_S
            )
            offset, response_frame = decode_forward_response(answer)
            if offset == FORWARD_NOT_CONTROLLER:
                raise NotController(None)
            if not await port.metadata.wait_for(offset, CATCH_UP_TIMEOUT_S):
                log.info(
                    "[node %d] metadata still behind offset %d after %s",
                    port.node_id,
                    offset,
                    request.api_key.name,
                )
            _, body = decode_response(request.api_key, request.api_version, response_frame)
            return body
        except (NotController, PrivatePayloadError) as exc:
            if loop.time() >= deadline:
                return error_response(
                    request,
                    ErrorCode.not_controller,
                    f"no active controller answered within {FORWARD_TIMEOUT_S:.0f} s ({exc})",
                )
        await asyncio.sleep(RETRY_S)


async def on_this_controller(
    context: C,
    request: Request,
    handle: Callable[[C, Request], Awaitable[Any]],
    error_response: ErrorResponse,
) -> Any:
    """A forwarded request: run it here, or say this node is not the controller."""
    channel = context.forward.channel
    try:
        if not channel.local_controller_active:
            raise NotController(channel.leader_id)
        return await handle(context, request)
    except NotController as exc:
        return error_response(request, ErrorCode.not_controller, str(exc))
