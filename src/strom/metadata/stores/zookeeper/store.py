"""The ZooKeeper metadata store: the classic znode layout behind strom's metadata store.

Every node is a broker that may become the controller. Per ZooKeeper session it:

1. registers: the ephemeral `/brokers/ids/<id>` (waiting while a previous process of the
   same broker still holds it, until that session expires);
2. elects: whoever creates the ephemeral `/controller` first is the active controller;
   everybody else watches it and tries again when it disappears.

The active controller bumps `/controller_epoch` (a conditional write, so two controllers
can never hold the same epoch), reads the whole layout back into a MetadataImage
(metadata/znodes.py) and from then on commits the decisions of ControllerService as
ZooKeeper multi-ops: a version check on `/controller_epoch`, which fences it as soon as a
newer controller exists, plus the znode writes that take the layout from the image before
a decision to the image after it. The decisions queued while a multi-op is under way share
the next one, and a decision too large for one request is cut into several
(metadata/znode_batches.py). A decision's entry is applied to this node's metadata once
its writes have succeeded; other brokers fetch the entries from it (as they fetch from a
Raft controller). Entry offsets start at the zxid of the epoch write, so they keep
growing from one controller to the next.

While active it also watches `/brokers/ids` (a broker whose session ended is fenced, and
its partitions get new leaders), `/brokers/topics` (a topic an operator wrote there by
hand is adopted: given a topic id, leaders and ISRs) and `/config/changes` (a config
written under `/config/...` takes effect when its change notification appears).

Losing the connection (SUSPENDED) ends controllership at once; the broker keeps serving
its partitions. When the session comes back the node registers and elects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from strom.config.zookeeper import ZooKeeperConnect
from strom.metadata import acl_znodes, znode_batches, znode_diff, znodes
from strom.metadata.image import MetadataImage
from strom.metadata.records import BrokerEndpoint, ConfigResourceType, decode_entry
from strom.metadata.stores.base import (
    ControllerListener,
    Liveness,
    NotMetadataLeader,
    QuorumDescription,
    StoreCapabilities,
    StorePorts,
)
from strom.metadata.stores.zookeeper import config_changes
from strom.metadata.stores.zookeeper.session import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionState,
    ZkSession,
)
from strom.metrics.latency import CommitTimer
from strom.raft.messages import Entry
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CHANGES = "/config/changes"
REGISTRATION_RETRY_S = 0.5
KEEP_CHANGES = 100
"""Change notifications kept under /config/changes; older ones are deleted."""

CAPABILITIES = StoreCapabilities(
    liveness=Liveness.SESSIONS,
    follows_controller=True,
    controller_listener=ControllerListener.CLIENT,
    quorum_refusal=(
        "this cluster keeps its metadata in ZooKeeper: there is no Raft quorum to describe"
    ),
)


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings:
    """The config values the store needs (zookeeper.connect and its timeouts)."""

    connect: ZooKeeperConnect
    session_timeout_ms: int
    connection_timeout_ms: int


class ZooKeeperStore:
    """The metadata store on ZooKeeper (see the module docstring)."""

    name = "zookeeper"
    capabilities = CAPABILITIES

    def __init__(self, settings: ZooKeeperSettings, ports: StorePorts) -> None:
        self._settings = settings
        self._ports = ports
        self.node_id = ports.node_id
        self._on_change = ports.on_change
        self._connect = settings.connect
        self._session: ZkSession | None = None
        self._session_tasks = TaskSet(
            f"[node {self.node_id}] zookeeper", expected=(KazooException,)
        )
        self._leader_tasks = TaskSet(f"[node {self.node_id}] zk controller")
        self.failure: BaseException | None = None
        self.leader_id: int | None = None
        self.is_leader = False
        self.term = 0
        """The controller epoch this node leads in (0 before it first led)."""
        self.live_brokers: frozenset[int] = frozenset()
        """Brokers with a /brokers/ids znode, as the active controller last saw them."""
        self._endpoints: dict[int, tuple[str, int]] = {}
        self._epoch_version = -1
        self._image = MetadataImage.empty()
        self._next_index = 0
        self._queue: asyncio.Queue[tuple[Entry, list[znodes.ZnodeOp]]] = asyncio.Queue()
        self._existing: set[str] = set()
        """Paths in ZooKeeper that a decision would otherwise create: those an operator
        wrote for a pending adoption, and config znodes present at takeover."""
        self._last_change = -1
        self._own_notices: set[str] = set()
        self._commit_timer = CommitTimer()
        self._started = False
        self._stopping = False
        """stop() closes the session: its end is no news then."""

    # --- the MetadataStore interface ---------------------------------------------------

    def propose(self, data: bytes) -> int:
        """Queue one entry (one decision) for writing to ZooKeeper; its offset."""
        if not self.is_leader:
            raise NotMetadataLeader(self.leader_id)
        index = self._next_index
        self._next_index += 1
        new = self._image.replay(decode_entry(data), offset=index)
        ops = znode_diff.diff(self._image, new, controller_epoch=self.term)
        self._image = new
        self._queue.put_nowait((Entry(index, self.term, data), ops))
        self._commit_timer.proposed(index, time.monotonic())
        return index

    @property
    def commit_timer(self) -> CommitTimer:
        """From a proposal to its multi-op's success in ZooKeeper."""
        return self._commit_timer

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None:
        return self._endpoints.get(node_id)

    def describe_quorum(self) -> QuorumDescription | None:
        return None  # no quorum: see capabilities.quorum_refusal

    def peer_stream(self) -> None:
        return None  # brokers talk to ZooKeeper, never to each other's stores

    def open(self) -> None:
        pass  # nothing on disk: the metadata is read from ZooKeeper at each takeover

    async def start(self) -> None:
        self._session = ZkSession(
            self._connect,
            session_timeout_ms=self._settings.session_timeout_ms,
            connection_timeout_ms=self._settings.connection_timeout_ms,
            on_state=self._on_state,
        )
        await self._session.start()
        for path in znodes.PARENTS:
            await self._session.ensure_path(path)
        log.info("[node %d] connected to ZooKeeper %s", self.node_id, self._connect)
        self._started = True
        self._session_tasks.spawn(self._run_session(), "zookeeper-session")

    async def stop(self) -> None:
        self._stopping = True
        self._resign("stopping")
        self._session_tasks.cancel()
        if self._session is not None:
            await self._session.close()

    def abandon(self) -> None:
        # kazoo keeps a session alive from threads of its own: a crash that left them
        # running would keep this broker registered for ever, so the session ends here
        # (ZooKeeper fences the broker at once rather than after its session timeout).
        self._stopping = True
        self._session_tasks.cancel()
        if self._session is not None:
            self._session.abandon()

    # --- session ----------------------------------------------------------------------

    def _on_state(self, state: SessionState) -> None:
        if state is SessionState.CONNECTED:
            if self._started:  # the first connection's session task is start()'s
                log.info("[node %d] ZooKeeper session connected again", self.node_id)
                self._session_tasks.cancel()
                self._session_tasks.spawn(self._run_session(), "zookeeper-session")
            return
        if self._stopping:
            return
        log.warning(
            "[node %d] ZooKeeper session %s: not acting as controller until it is back",
            self.node_id,
            "expired" if state is SessionState.LOST else "suspended",
        )
        self._session_tasks.cancel()
        self._resign(f"ZooKeeper session {state.value}")
        self.leader_id = None
        self._on_change()

    @property
    def session(self) -> ZkSession:
        assert self._session is not None
        return self._session

    async def _run_session(self) -> None:
        await self._register()
        await self._elect()

    async def _register(self) -> None:
        """The ephemeral /brokers/ids/<id>; waits while another session still holds it."""
        advertised = self._ports.advertised()
        host, port = advertised.host, advertised.port
        data = znodes.broker_registration(
            broker_id=self.node_id,
            host=host,
            port=port,
            rack=self._ports.rack,
            endpoints=advertised.endpoints
            or [BrokerEndpoint(advertised.listener_name, host, port)],
            incarnation_id=self._ports.incarnation_id,
            timestamp_ms=self._ports.clock_ms(),
        )
        path = f"{BROKER_IDS}/{self.node_id}"
        waited = False
        while True:
            try:
                await self.session.create(path, data, ephemeral=True)
                break
            except NodeExistsError:
                stat = await self.session.exists(path)
                if stat is not None and stat.ephemeralOwner == self.session.session_id:
                    await self.session.set(path, data)
                    break
                if not waited:
                    log.warning(
                        "[node %d] %s is held by another ZooKeeper session (a previous "
                        "process of broker %d, or another broker with the same broker.id); "
                        "waiting for it to end",
                        self.node_id,
                        path,
                        self.node_id,
                    )
                    waited = True
                await asyncio.sleep(REGISTRATION_RETRY_S)
        log.info("[node %d] registered in ZooKeeper at %s", self.node_id, path)

    async def _elect(self) -> None:
        session = self.session
        while True:
            changed = asyncio.Event()
            with contextlib.suppress(NodeExistsError):
                await session.create(
                    CONTROLLER,
                    znodes.controller_json(self.node_id, self._ports.clock_ms()),
                    ephemeral=True,
                )
            try:
                data, stat = await session.get(CONTROLLER, watch=changed)
            except NoNodeError:
                continue
            ours = stat.ephemeralOwner == session.session_id
            holder = znodes.parse_controller(data)
            if ours and not self.is_leader:
                await self._activate()
            elif not ours:
                if self.is_leader:
                    self._resign(f"/controller is now held by broker {holder}")
                await self._learn_endpoint(holder)
                if self.leader_id != holder:
                    log.info("[node %d] the active controller is broker %d", self.node_id, holder)
                self.leader_id = holder
                self._on_change()
            await changed.wait()

    async def _learn_endpoint(self, broker_id: int) -> None:
        try:
            data, _stat = await self.session.get(f"{BROKER_IDS}/{broker_id}")
        except NoNodeError:
            return
        try:
            registration = znodes.parse_broker_registration(data)
        except znodes.ZnodeError as exc:
            log.warning("[node %d] broker %d's registration: %s", self.node_id, broker_id, exc)
            return
        self._endpoints[broker_id] = (registration.host, registration.port)

    # --- controllership -----------------------------------------------------------------

    async def _activate(self) -> None:
        session = self.session
        while True:
            try:
                data, stat = await session.get(CONTROLLER_EPOCH)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    await session.create(CONTROLLER_EPOCH, b"0")
                continue
            epoch = int(data.decode() or "0") + 1
            try:
                written = await session.set(CONTROLLER_EPOCH, str(epoch).encode(), stat.version)
            except BadVersionError:
                continue  # another broker bumped it meanwhile: read it again
            break
        tree = await self._read_tree()
        # Known before the controller decides anything: a heartbeat from a broker not in
        # it keeps that broker fenced.
        self.live_brokers = _broker_ids(await session.children(BROKER_IDS))
        base = int(written.mzxid)
        image = znodes.image_from_znodes(tree, offset=base)
        self.term = epoch
        self._epoch_version = written.version
        leftovers = znode_diff.leftover_znodes(tree, image)
        if leftovers and await self._delete_leftovers(leftovers):
            tree = {path: data for path, data in tree.items() if path not in leftovers}
        self._image = image
        self._next_index = base + 1
        self._queue = asyncio.Queue()
        # Config znodes the image may lack (Kafka's tools leave empty ones behind): a
        # decision that writes one sets it rather than creating it.
        self._existing = {p for p in tree if p.startswith("/config/") and CHANGES not in p}
        self._ports.metadata.reset(image, index=base, term=epoch)
        changes = [c for c in tree if c.startswith(CHANGES + "/")]
        self._last_change = max((_sequence(c) for c in changes), default=-1)
        self.is_leader = True
        self.leader_id = self.node_id
        advertised = self._ports.advertised()
        self._endpoints[self.node_id] = (advertised.host, advertised.port)
        log.info(
            "[node %d] active controller, controller epoch %d (%d topics read from ZooKeeper)",
            self.node_id,
            epoch,
            len(image.topics_by_name),
        )
        self._leader_tasks.spawn(self._write_loop(), "zk-writer")
        self._leader_tasks.spawn(self._watch_brokers(), "zk-watch-brokers")
        self._leader_tasks.spawn(self._watch_topics(), "zk-watch-topics")
        self._leader_tasks.spawn(self._watch_changes(), "zk-watch-config-changes")
        for root in (acl_znodes.ACL_CHANGES, acl_znodes.EXTENDED_ACL_CHANGES):
            self._leader_tasks.spawn(self._watch_acl_notices(root), f"zk-watch{root}")
        self._on_change()

    async def _release_controller(self) -> None:
        """Delete /controller if this session still holds it."""
        session = self.session
        with contextlib.suppress(NoNodeError):
            _data, stat = await session.get(CONTROLLER)
            if stat.ephemeralOwner == session.session_id:
                await session.delete(CONTROLLER, stat.version)

    async def _delete_leftovers(self, paths: list[str]) -> bool:
        """Delete config znodes that hold nothing and that the image lacks (children first,
        see znode_diff.leftover_znodes), guarded by this controller's epoch. Best effort:
        False if ZooKeeper refused."""
        request: list[tuple[str, tuple[Any, ...]]] = [
            ("check", (CONTROLLER_EPOCH, self._epoch_version))
        ]
        request += [("delete", (path,)) for path in paths]
        try:
            results = await self.session.transaction(request)
        except KazooException:
            return False
        if any(isinstance(result, BaseException) for result in results):
            return False
        log.info("[node %d] deleted empty config znodes: %s", self.node_id, ", ".join(paths))
        return True

    def _resign(self, why: str) -> None:
        if not self.is_leader:
            return
        log.info("[node %d] resigning as controller: %s", self.node_id, why)
        self.is_leader = False
        self.leader_id = None
        self._leader_tasks.cancel()
        self._queue = asyncio.Queue()
        self._commit_timer.abandon()
        self._on_change()

    async def _read_tree(self) -> dict[str, bytes]:
        tree: dict[str, bytes] = {}
        session = self.session
        await asyncio.gather(*(self._collect(root, tree) for root in znodes.TREE_ROOTS))
        with contextlib.suppress(NoNodeError):
            tree[znodes.PRODUCER_ID_BLOCK], _stat = await session.get(znodes.PRODUCER_ID_BLOCK)
        for name in await session.children(CHANGES):
            tree[f"{CHANGES}/{name}"] = b""
        return tree

    async def _write_loop(self) -> None:
        """Write the queued entries, as few multi-ops as fit (znode_batches), each guarded
        by the controller epoch's version; apply each entry once it is written."""
        queue = self._queue
        while True:
            waiting = [await queue.get()]
            while not queue.empty():
                waiting.append(queue.get_nowait())
            for batch in znode_batches.batches(waiting, znode_batches.DEFAULT_BUDGET_BYTES):
                if not await self._write(batch.ops):
                    return
                if batch.done:
                    self._ports.metadata.apply(batch.done)
                    self._commit_timer.committed(batch.done[-1].index, time.monotonic())

    async def _write(self, ops: list[znodes.ZnodeOp]) -> bool:
        """One multi-op; False (having resigned) when ZooKeeper refused it."""
        request: list[tuple[str, tuple[Any, ...]]] = [
            ("check", (CONTROLLER_EPOCH, self._epoch_version))
        ]
        request += [self._kazoo_op(op) for op in ops]
        try:
            results = await self.session.transaction(request)
        except KazooException as exc:
            why = f"writing metadata to ZooKeeper failed: {exc!r}"
        else:
            failed = [r for r in results if isinstance(r, BaseException)]
            if not failed:
                # The notices written here describe changes the image has already: their
                # echo must not be read back (a later change could be undone by it).
                self._own_notices.update(
                    str(result)
                    for op, result in zip(ops, results[1:], strict=True)
                    if op.kind is znodes.OpKind.NOTIFY
                )
                return True
            real = [r for r in failed if not isinstance(r, RolledBackError)]
            why = (
                "a metadata write was refused by ZooKeeper "
                f"({', '.join(type(r).__name__ for r in real or failed)}): "
                + (
                    "a newer controller exists"
                    if real and isinstance(real[0], BadVersionError)
                    else "the znodes differ from what this controller read"
                )
            )
        self._resign(why)
        # Let a controller (perhaps this node again) take over from a fresh read.
        self._session_tasks.spawn(self._release_controller(), "zk-release-controller")
        return False

    def _kazoo_op(self, op: znodes.ZnodeOp) -> tuple[str, tuple[Any, ...]]:
        kind = op.kind
        if kind is znodes.OpKind.CREATE and op.path in self._existing:
            self._existing.discard(op.path)
            return ("set_data", (op.path, op.data))
        if kind is znodes.OpKind.CREATE:
            return ("create", (op.path, op.data))
        if kind is znodes.OpKind.SET:
            return ("set_data", (op.path, op.data))
        if kind is znodes.OpKind.DELETE:
            self._existing.discard(op.path)
            return ("delete", (op.path,))
        return ("create", (op.path, op.data, None, False, True))

    # --- the controller's watches ------------------------------------------------------

    async def _watch_brokers(self) -> None:
        while True:
            changed = asyncio.Event()
            live = self.live_brokers = _broker_ids(
                await self.session.children(BROKER_IDS, watch=changed)
            )
            for broker_id in live - set(self._endpoints):
                await self._learn_endpoint(broker_id)
            watches = self._ports.watches()
            if watches is not None:
                watches.on_live_brokers(live, "their ZooKeeper session ended")
            await changed.wait()

    async def _watch_topics(self) -> None:
        while True:
            changed = asyncio.Event()
            names = await self.session.children(TOPICS, watch=changed)
            unknown = [name for name in names if name not in self._image.topics_by_name]
            for name in unknown:
                await self._adopt(name)
            await changed.wait()

    async def _adopt(self, name: str) -> None:
        """A topic an operator wrote into /brokers/topics by hand."""
        try:
            data, _stat = await self.session.get(f"{TOPICS}/{name}")
        except NoNodeError:
            return
        try:
            _topic_id, assignment = znodes.parse_topic(data)
        except znodes.ZnodeError as exc:
            log.warning("[node %d] ignoring %s/%s: %s", self.node_id, TOPICS, name, exc)
            return
        existing: dict[str, bytes] = {}
        await self._collect(f"{TOPICS}/{name}", existing)
        # Kafka's tools write the topic's config znode first.
        await self._collect(znodes.config_path(ConfigResourceType.TOPIC, name), existing)
        self._existing |= set(existing)
        watches = self._ports.watches()
        if watches is not None:
            await watches.adopt_topic(
                name, assignment, f"topic {name} written into ZooKeeper by hand"
            )

    async def _collect(self, path: str, into: dict[str, bytes]) -> None:
        """`path` and everything under it that exists, read into `into`."""
        try:
            data, _stat = await self.session.get(path)
            names = await self.session.children(path)
        except NoNodeError:
            return
        into[path] = data
        await asyncio.gather(*(self._collect(f"{path}/{child}", into) for child in names))

    async def _watch_changes(self) -> None:
        while True:
            changed = asyncio.Event()
            names = sorted(await self.session.children(CHANGES, watch=changed), key=_sequence)
            for name in names:
                sequence = _sequence(name)
                if sequence <= self._last_change:
                    continue
                self._last_change = sequence
                if not self._own_notice(f"{CHANGES}/{name}"):
                    await self._on_config_change(f"{CHANGES}/{name}")
            await self._purge_changes(names)
            await changed.wait()

    def _own_notice(self, path: str) -> bool:
        """Whether this controller wrote the notice at `path` (forgotten once seen)."""
        if path in self._own_notices:
            self._own_notices.discard(path)
            return True
        return False

    async def _on_config_change(self, path: str) -> None:
        watches = self._ports.watches()
        if watches is not None:
            await config_changes.apply_change(self.session, watches, path, self.node_id)

    async def _purge_changes(self, names: Sequence[str], root: str = CHANGES) -> None:
        for name in names[:-KEEP_CHANGES]:
            with contextlib.suppress(NoNodeError):
                await self.session.delete(f"{root}/{name}")

    async def _watch_acl_notices(self, root: str) -> None:
        """Each new ACL change notice makes the image's bindings of its resource those
        of its znode (notices there at takeover are passed over: the tree had them)."""
        last: int | None = None
        while True:
            changed = asyncio.Event()
            names = sorted(await self.session.children(root, watch=changed), key=_sequence)
            last = max(map(_sequence, names), default=-1) if last is None else last
            for name in names:
                if _sequence(name) > last:
                    last = _sequence(name)
                    if not self._own_notice(f"{root}/{name}"):
                        await self._on_acl_notice(f"{root}/{name}")
            await self._purge_changes(names, root)
            await changed.wait()

    async def _on_acl_notice(self, path: str) -> None:
        try:
            data, _stat = await self.session.get(path)
            resource = acl_znodes.parse_acl_change(path, data)
            znode = acl_znodes.acl_path(resource)
            stored = await self.session.data_or_empty(znode)
            bindings = acl_znodes.parse_acls(resource, stored, znode)
        except NoNodeError:
            return
        except znodes.ZnodeError as exc:
            log.warning("[node %d] ignoring ACL change %s: %s", self.node_id, path, exc)
            return
        watches = self._ports.watches()
        if watches is not None:
            source = f"ACLs of {znode} written into ZooKeeper"
            await watches.apply_stored_acls(resource, bindings, source)


def _broker_ids(names: Sequence[str]) -> frozenset[int]:
    """The ids of the /brokers/ids children (anything else there is ignored)."""
    return frozenset(int(name) for name in names if name.isdigit())


def _sequence(name: str) -> int:
    digits = name.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1
