"""The Raft core on the event loop: its clock, its disk, its peers and its state machine.

    created -> open() (the log read back) -> start() -> running -> stop() (leadership
    handed over first) -> stopped

One task owns the core. It takes each `Ready`, persists it in a worker thread (fsync),
sends its messages, applies its committed entries to the state machine and advances the
core; inbound messages, ticks and proposals only touch the core between those steps and
wake the task. Every peer has an outbound queue and a sender task of its own, so a dead
or slow controller never holds up the others; a message that cannot be sent is dropped,
which Raft tolerates (the leader retries on its next heartbeat).

Streams between controllers open with a hello naming the sender and its cluster id, and
a node refuses the stream of another cluster's node, so a controller started on another
cluster's data can never vote or replicate into this one.

The state machine is the node's committed metadata (the AppliedMetadata port); the driver
never sees the broker, only the StorePorts it was built with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from random import Random

from strom.client import ClientError, KafkaConnection
from strom.client.security import ClientSecurity
from strom.config.listeners import QuorumVoter
from strom.metadata.stores.base import (
    ControllerListener,
    Liveness,
    NotMetadataLeader,
    QuorumDescription,
    StoreCapabilities,
    StorePorts,
    VoterProgress,
)
from strom.metrics.latency import CommitTimer
from strom.raft import wire
from strom.raft.core import RaftConfig, RaftNode, RaftRole
from strom.raft.messages import Message, Ready
from strom.raft.storage import RaftStorage
from strom.server.private import (
    PrivateApi,
    PrivatePayloadError,
    decode_hello,
    encode_hello,
)
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)

TICK_INTERVAL_S = 0.02
_PEER_QUEUE_LIMIT = 4096
_RECONNECT_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)
TRANSFER_WAIT_S = 2.0


CAPABILITIES = StoreCapabilities(
    liveness=Liveness.HEARTBEATS,
    follows_controller=False,
    controller_listener=ControllerListener.CONTROLLER,
    quorum_refusal=None,
)


class RaftDriver:
    """The built-in Raft quorum as the metadata store (metadata/stores/base.py)."""

    name = "raft"
    capabilities = CAPABILITIES
    live_brokers: frozenset[int] = frozenset()  # liveness comes from heartbeats

    def __init__(
        self,
        ports: StorePorts,
        *,
        voters: Sequence[QuorumVoter],
        directory: Path,
        config: RaftConfig,
        snapshot_every_bytes: int,
        security: Callable[[], ClientSecurity | None] = lambda: None,
    ) -> None:
        """`security`: how connections to the other voters are secured (the controller
        listener's)."""
        node_id = ports.node_id
        self._security = security
        self.node_id = node_id
        self._voters = {voter.node_id: voter for voter in voters}
        self._directory = directory
        self._config = config
        self._state_machine = ports.metadata
        self._cluster_id = ports.cluster_id
        self._snapshot_every_bytes = snapshot_every_bytes
        self._on_change = ports.on_change
        self._fail = ports.fail
        self._now_ms = ports.clock_ms
        self._wake = asyncio.Event()
        self._tasks = TaskSet(f"[node {node_id}] Raft", on_failure=self._failed)
        self._queues: dict[int, asyncio.Queue[Message]] = {}
        self._bytes_since_snapshot = 0
        self._stopping = False
        self._seen: tuple[RaftRole, int, int | None] | None = None
        self._commit_timer = CommitTimer()
        self.storage: RaftStorage
        self.node: RaftNode
        self.failure: BaseException | None = None

    # --- lifecycle --------------------------------------------------------------------

    def open(self) -> None:
        """Read the log and snapshot back and rebuild the core (no I/O to peers yet)."""
        self.storage = RaftStorage.open(self._directory)
        restored = self.storage.restored()
        if restored.snapshot is not None:
            self._state_machine.restore(restored.snapshot)
        self.node = RaftNode(
            self.node_id,
            sorted(self._voters),
            restored,
            self._config,
            Random(),
            self._now_ms(),
        )
        log.info(
            "[node %d] Raft log opened: term %d, %d entries after snapshot %s, voters %s",
            self.node_id,
            restored.hard_state.term,
            len(restored.entries),
            restored.snapshot.index if restored.snapshot else "none",
            sorted(self._voters),
        )

    async def start(self) -> None:
        self._tasks.spawn(self._run(), "raft")
        self._tasks.spawn(self._tick(), "raft-ticks")
        for peer in self._voters:
            if peer != self.node_id:
                self._queues[peer] = asyncio.Queue(_PEER_QUEUE_LIMIT)
                self._tasks.spawn(self._send_to(peer), f"raft-peer-{peer}")

    async def stop(self) -> None:
        """Hand leadership to another voter (briefly waiting for it), then stop."""
        leading = self.node.role == RaftRole.LEADER and len(self._voters) > 1
        if leading and self.node.transfer_leadership(None, self._now_ms()):
            self._wake.set()
            deadline = asyncio.get_running_loop().time() + TRANSFER_WAIT_S
            while (
                self.node.leader_id in (self.node_id, None)
                and asyncio.get_running_loop().time() < deadline
            ):
                await asyncio.sleep(0.02)
            log.info(
                "[node %d] handed controller leadership to node %s",
                self.node_id,
                self.node.leader_id,
            )
        self._stopping = True
        await self._tasks.stop()
        self.storage.close()

    def abandon(self) -> None:
        self._stopping = True
        self.storage.close()

    def _failed(self, error: BaseException) -> None:
        self.failure = error
        # The node stops: it cannot go on without its Raft loop.
        self._fail(f"the {self.name} metadata store failed: {error!r}")

    # --- state ------------------------------------------------------------------------

    @property
    def leader_id(self) -> int | None:
        return self.node.leader_id

    @property
    def is_leader(self) -> bool:
        return self.node.role == RaftRole.LEADER

    @property
    def term(self) -> int:
        return self.node.term

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None:
        voter = self._voters.get(node_id)
        return None if voter is None else (voter.host, voter.port)

    @property
    def voters(self) -> Sequence[QuorumVoter]:
        return list(self._voters.values())

    def describe_quorum(self) -> QuorumDescription | None:
        if not self.is_leader:
            return None
        node = self.node
        progress = node.replica_progress()
        voters = []
        for voter_id in node.voters:
            state = progress.get(voter_id)
            if state is None:
                voters.append(VoterProgress(voter_id, -1, -1, -1))
                continue
            match, contact = state.match_index, state.last_contact_ms
            voters.append(
                VoterProgress(
                    voter_id,
                    # Kafka reports log end offsets (one past the last entry); so does strom.
                    log_end_offset=match + 1,
                    last_fetch_timestamp=contact,
                    last_caught_up_timestamp=contact if match >= node.commit_index else -1,
                )
            )
        return QuorumDescription(
            leader_epoch=node.term,
            high_watermark=node.commit_index + 1,
            voters=tuple(voters),
            endpoints=tuple((v.node_id, v.host, v.port) for v in self._voters.values()),
        )

    def peer_stream(self) -> RaftSession:
        return RaftSession(self)

    # --- inputs -----------------------------------------------------------------------

    def propose(self, data: bytes) -> int:
        index = self.node.propose(data, self._now_ms())
        if index is None:
            raise NotMetadataLeader(self.node.leader_id)
        self._commit_timer.proposed(index, time.monotonic())
        self._wake.set()
        return index

    @property
    def commit_timer(self) -> CommitTimer:
        return self._commit_timer

    def receive(self, api_key: int, payload: bytes, session: RaftSession) -> None:
        """A frame of a Raft stream from a peer (see RaftSession)."""
        if api_key == PrivateApi.RAFT_HELLO:
            peer, cluster_id = decode_hello(payload)
            ours = self._cluster_id()
            if cluster_id is not None and ours is not None and cluster_id != ours:
                raise PrivatePayloadError(
                    f"node {peer} belongs to cluster {cluster_id}, this node to cluster "
                    f"{ours}: check controller.quorum.voters and the node's data directory"
                )
            if peer not in self._voters:
                raise PrivatePayloadError(
                    f"node {peer} is not in controller.quorum.voters of node {self.node_id}"
                )
            session.peer = peer
            return
        if session.peer is None:
            raise PrivatePayloadError("Raft message before the stream's hello")
        try:
            message = wire.decode(payload)
        except wire.WireError as exc:
            raise PrivatePayloadError(f"bad Raft message from node {session.peer}: {exc}") from None
        if message.sender != session.peer or message.recipient != self.node_id:
            raise PrivatePayloadError(
                f"Raft message from node {message.sender} to node {message.recipient} on "
                f"the stream of node {session.peer}"
            )
        if self._stopping:
            return
        self.node.step(message, self._now_ms())
        self._wake.set()

    # --- the loop that owns the core ----------------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S)
            self.node.tick(self._now_ms())
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                ready = self.node.ready()
                if ready.empty:
                    break
                await self._handle(ready)
            self._notice_changes()

    async def _handle(self, ready: Ready) -> None:
        if (
            ready.hard_state is not None
            or ready.snapshot is not None
            or ready.truncate_from is not None
            or ready.entries
        ):
            await asyncio.to_thread(self.storage.persist, ready)
        for message in ready.messages:
            self._send(message)
        if ready.apply_snapshot is not None:
            self._state_machine.restore(ready.apply_snapshot)
            self._bytes_since_snapshot = 0
        if ready.committed:
            self._state_machine.apply(ready.committed)
            self._commit_timer.committed(ready.committed[-1].index, time.monotonic())
            self._bytes_since_snapshot += sum(len(e.data) + 32 for e in ready.committed)
        self.node.advance(ready)
        if self._bytes_since_snapshot >= self._snapshot_every_bytes:
            await self._snapshot()
        if ready.committed or ready.apply_snapshot is not None:
            self._notice_changes()

    async def _snapshot(self) -> None:
        snapshot = self._state_machine.take_snapshot()
        self._bytes_since_snapshot = 0
        if snapshot is None:
            return
        await asyncio.to_thread(self.storage.save_snapshot, snapshot)
        self.node.compact(snapshot)
        await asyncio.to_thread(self.storage.compact, snapshot.index)
        log.info(
            "[node %d] metadata snapshot at offset %d (%d bytes); log compacted",
            self.node_id,
            snapshot.index,
            len(snapshot.data),
        )

    def _notice_changes(self) -> None:
        seen = (self.node.role, self.node.term, self.node.leader_id)
        if seen != self._seen:
            if seen[0] is not RaftRole.LEADER:
                self._commit_timer.abandon()
            if self._seen is None or seen[2] != self._seen[2]:
                log.info(
                    "[node %d] Raft term %d: %s, leader %s",
                    self.node_id,
                    seen[1],
                    seen[0].name.lower(),
                    seen[2],
                )
            self._seen = seen
        self._on_change()

    # --- peers --------------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        queue = self._queues.get(message.recipient)
        if queue is None:
            return
        if queue.full():
            queue.get_nowait()  # drop the oldest: Raft retransmits what matters
        queue.put_nowait(message)

    async def _send_to(self, peer: int) -> None:
        voter = self._voters[peer]
        queue = self._queues[peer]
        failures = 0
        while True:
            message = await queue.get()
            try:
                connection = await KafkaConnection.connect(
                    voter.host,
                    voter.port,
                    client_id=f"strom-raft-{self.node_id}",
                    timeout_s=2.0,
                    security=self._security(),
                )
            except (ClientError, OSError):
                delay = _RECONNECT_BACKOFF_S[min(failures, len(_RECONNECT_BACKOFF_S) - 1)]
                failures += 1
                if failures == 5:
                    log.info(
                        "[node %d] cannot reach controller %d at %s:%d yet",
                        self.node_id,
                        peer,
                        voter.host,
                        voter.port,
                    )
                await asyncio.sleep(delay)
                continue
            if failures >= 5:
                log.info("[node %d] reached controller %d", self.node_id, peer)
            failures = 0
            try:
                await connection.send_oneway(
                    PrivateApi.RAFT_HELLO, 0, encode_hello(self.node_id, self._cluster_id())
                )
                while True:
                    await connection.send_oneway(PrivateApi.RAFT, 0, wire.encode(message))
                    message = await queue.get()
            except (ClientError, OSError):
                pass
            finally:
                connection.close()
                with contextlib.suppress(Exception):
                    await connection.wait_closed()


class RaftSession:
    """Per inbound controller-listener connection: who is at the other end."""

    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver
        self.peer: int | None = None

    def receive(self, api_key: int, payload: bytes) -> None:
        self._driver.receive(api_key, payload, self)
