"""strom's node-to-node APIs on the controller listener (see server/private.py).

Served wherever other nodes reach this one (broker.py's `_serve_nodes`: the controller
listener, or the client listeners of a store whose controller is reached there): each
such connection gets its own `PrivateSession`, which answers RAFT_HELLO and RAFT (handed
to the store's stream of that peer), METADATA_FETCH (committed entries for a node that
follows the metadata) and FORWARD (an admin request, run here if this node is the active
controller: a client's, which carries its principal, through the client handlers, which
check it against this node's ACLs; a node's own through the controller handlers).
"""

from __future__ import annotations

from strom.metadata.stores import PeerStream
from strom.protocol.codec import RequestError, decode_request, encode_response
from strom.server.handlers.ports import PrivateContext
from strom.server.private import (
    FORWARD_NOT_CONTROLLER,
    FORWARDED_LISTENER,
    MetadataFetchResponse,
    PrivateApi,
    PrivatePayloadError,
    decode_fetch_request,
    decode_forward_request,
    encode_fetch_response,
    encode_forward_response,
)

_FETCH_MAX_BYTES = 1 << 20
# CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
# AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders, DescribeQuorum,
# UnregisterBroker, AlterUserScramCredentials, CreateAcls, DeleteAcls, AlterClientQuotas
FORWARDABLE = frozenset({19, 20, 37, 33, 44, 45, 46, 43, 55, 64, 51, 30, 31, 49})


class PrivateSession:
    """One inbound controller-listener connection's view of the private APIs."""

    def __init__(self, context: PrivateContext) -> None:
        self._context = context
        self._peer: PeerStream | None = None
        """The store's stream of the node at the other end (Raft), once it spoke."""

    async def handle(self, api_key: int, api_version: int, payload: bytes) -> bytes | None:
        if api_key in (PrivateApi.RAFT_HELLO, PrivateApi.RAFT):
            if self._peer is None:
                store = self._context.store()
                self._peer = store.peer_stream() if store is not None else None
                if self._peer is None:
                    raise PrivatePayloadError(f"node {self._context.node_id} is not a controller")
            self._peer.receive(api_key, payload)
            return None
        if api_key == PrivateApi.METADATA_FETCH:
            return await self._metadata_fetch(payload)
        if api_key == PrivateApi.FORWARD:
            return await self._forward(api_version, payload)
        raise PrivatePayloadError(f"unknown private API {api_key}")

    async def _metadata_fetch(self, payload: bytes) -> bytes:
        request = decode_fetch_request(payload)
        state = self._context.metadata
        if state.applied_index < request.from_index and request.max_wait_ms > 0:
            await state.wait_for(request.from_index, request.max_wait_ms / 1000)
        snapshot, entries = state.entries_from(request.from_index, _FETCH_MAX_BYTES)
        store = self._context.store()
        leader = store.leader_id if store is not None else None
        return encode_fetch_response(
            MetadataFetchResponse(
                leader_id=-1 if leader is None else leader,
                term=store.term if store is not None else 0,
                commit_index=state.applied_index,
                snapshot=snapshot,
                entries=tuple(entries),
            )
        )

    async def _forward(self, api_version: int, payload: bytes) -> bytes:
        context = self._context
        forwarded = decode_forward_request(api_version, payload)
        try:
            if forwarded.principal is None:  # the sender's own: run as it is
                request = decode_request(forwarded.frame, client_host="forwarded")
            else:  # a client's: the client handlers check it again, as on a listener
                request = decode_request(
                    forwarded.frame,
                    client_host=forwarded.client_host,
                    listener=FORWARDED_LISTENER,
                    principal=forwarded.principal,
                )
        except RequestError as exc:
            raise PrivatePayloadError(f"bad forwarded request: {exc}") from None
        if request.api_key not in FORWARDABLE:
            raise PrivatePayloadError(f"{request.api_key.name} cannot be forwarded")
        if not context.channel.local_controller_active:
            # Perhaps elected a moment ago and not acting yet: the sender tries again.
            return encode_forward_response(FORWARD_NOT_CONTROLLER, b"")
        body = await context.dispatch_controller(request)
        frame = encode_response(request.correlation_id, body)[4:]
        return encode_forward_response(context.metadata.applied_index, frame)
