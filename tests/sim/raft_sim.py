"""A seeded, deterministic simulation of a Raft group of 3 or 5 `RaftNode` cores.

One `Random(seed)` decides everything: the cluster size and timeouts, when nodes tick,
which client proposes what to whom, and the faults - lost, delayed (sometimes by several
election timeouts), duplicated and reordered messages; partitions (both ways and one way)
that come and go; crashes between steps and in the middle of handling a Ready (before
anything is persisted, after the hard state and a prefix of the entries, after persisting,
after sending part of the messages, after applying), some aimed at new leaders and at
leaders that just committed, each followed by a restart from the simulated disk;
leadership transfers; snapshots of the state machine (the list of applied data) and
`compact`; a disk that is instant or slow (then the node steps, ticks and takes proposals
between `ready()` and `advance()`, as the asyncio shell lets it). The clock is manual;
nothing sleeps.

`History` checks after every step, at the cost of only what changed:
1. election safety: at most one leader per term, over the whole history; no node
   persists two votes in one term or moves its persisted term back;
2. log matching: every entry any node hands to its shell in a Ready, every stored log at
   each restart and every in-memory log at the end is checked against all entries ever
   seen: an (index, term) pair always carries the same data and follows the same term at
   index - 1, which by induction makes two logs that share an (index, term) identical up
   to it; every Ready appends right after the stored log;
3. leader completeness: a new leader's log holds every entry committed so far (an index at
   or below some node's commit index, with the term it had there; below the leader's
   snapshot base (4) covers it). Sooner: no log lacking the latest committed entry (in
   memory or on disk) is as up-to-date (§5.4.1) as a majority of the stored logs, or it
   could win a vote. In correct Raft a majority stores an entry of the committing leader's
   term at or after it, and any log as up-to-date as one of those holds it; the check
   fails as soon as a leader commits an older term's entry by counting (Figure 8);
4. state machine safety: no two nodes ever apply different data at one index (snapshots
   included, entry by entry), and each node applies consecutive indexes.
Then everything heals and the run goes on without faults until one leader has committed a
proposal of its own and every node applied the same log, holding everything ever applied.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass, field
from random import Random

from raft_history import History, InvariantViolation

from strom.raft.core import RaftConfig, RaftNode, Role
from strom.raft.messages import Entry, HardState, Message, Ready, Restored, Snapshot

_DELIVER, _TICK, _CLIENT, _FAULT, _RESTART, _UNBLOCK, _HEAL, _PERSISTED = range(8)  # events
_CRASH_POINTS = ("before persist", "partial persist", "after persist", "mid send", "after apply")


def decode_machine(data: bytes) -> list[bytes]:
    """Snapshot bytes (4-byte length + data per applied entry) back to the applied list."""
    applied: list[bytes] = []
    position = 0
    while position < len(data):
        size = int.from_bytes(data[position : position + 4], "big")
        applied.append(data[position + 4 : position + 4 + size])
        position += 4 + size
    return applied


@dataclass
class Disk:
    """What survives a crash: hard state, the latest snapshot, the entries after it."""

    hard_state: HardState = field(default_factory=lambda: HardState(0, None))
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)
    tail: tuple[int, int] = (0, 0)  # (last term, last index)

    def save(self, ready: Ready, entries: tuple[Entry, ...]) -> None:
        """Steps 1-4 of a Ready (with `entries`: all of ready.entries or a prefix)."""
        if ready.hard_state is not None:
            self.hard_state = ready.hard_state
        if ready.snapshot is not None:
            self.snapshot = ready.snapshot
            self.entries = [entry for entry in self.entries if entry.index > ready.snapshot.index]
        if ready.truncate_from is not None:
            self.entries = [entry for entry in self.entries if entry.index < ready.truncate_from]
        base = self.snapshot.index if self.snapshot is not None else 0
        last_index = self.entries[-1].index if self.entries else base
        if entries and entries[0].index != last_index + 1:
            raise InvariantViolation(f"a Ready appends {entries[0].index} after {last_index}")
        self.entries.extend(entries)
        if self.entries:
            self.tail = (self.entries[-1].term, self.entries[-1].index)
        elif self.snapshot is not None:
            self.tail = (self.snapshot.term, self.snapshot.index)
        else:
            self.tail = (0, 0)

    def compact(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.entries = [entry for entry in self.entries if entry.index > snapshot.index]

    def holds(self, index: int, term: int) -> bool:
        if self.snapshot is not None and index <= self.snapshot.index:
            return True
        if not self.entries or not self.entries[0].index <= index <= self.entries[-1].index:
            return False
        return self.entries[index - self.entries[0].index].term == term

    def restored(self) -> Restored:
        return Restored(self.hard_state, self.snapshot, tuple(self.entries))


@dataclass
class SimNode:
    node_id: int
    disk: Disk = field(default_factory=Disk)
    core: RaftNode | None = None  # None while crashed
    machine: list[bytes] = field(default_factory=list)  # applied data; index i at i - 1
    encoded: bytearray = field(default_factory=bytearray)  # the machine as snapshot bytes
    applied_term: int = 0
    seen_commit: int = 0
    led_term: int | None = None  # the term it was last seen leading
    doom: str | None = None  # crash at this point of its next Ready
    incarnation: int = 0


class RaftSim:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = self.rng = Random(seed)
        self.size = rng.choice((3, 5))
        timeout_ms = rng.choice((50, 100, 200))
        self.config = RaftConfig(
            election_timeout_ms=timeout_ms,
            heartbeat_interval_ms=timeout_ms // rng.choice((3, 4, 6)),
            max_append_bytes=rng.choice((1, 1, 40, 200, 1 << 20)),
        )
        self.tick_ms = timeout_ms // 4
        self.max_delay_ms = rng.choice((2, timeout_ms // 10, timeout_ms // 3))
        self.loss = rng.choice((0.0, 0.02, 0.1, 0.3))
        self.duplicate = rng.choice((0.0, 0.03, 0.2))
        self.long_delay = rng.choice((0.0, 0.01, 0.05))
        self.crash_in_ready = rng.choice((0.0, 0.002, 0.01, 0.03))
        self.crash_on_commit = rng.choice((0.0, 0.0, 0.02, 0.1))
        self.crash_new_leader = rng.choice((0.0, 0.0, 0.1, 0.3))
        self.compact_every = rng.choice((2, 5, 20, 10**9))
        self.fsync_ms = rng.choice((0, 0, 1, 10))  # 0: the disk is done within the step
        self.fault_every_ms = timeout_ms * rng.choice((1, 2, 4)) // 2
        self.fault_phase_ms = 40 * timeout_ms
        self.voters = tuple(range(1, self.size + 1))
        self.nodes = {node_id: SimNode(node_id) for node_id in self.voters}
        self.blocked: Counter[tuple[int, int]] = Counter()  # (sender, recipient) links cut
        self.faulty = True
        self.history = History()
        self.trace: deque[tuple[int, str, object]] = deque(maxlen=60)
        self.now_ms = 0
        self.proposed = 0
        self.finals: set[bytes] = set()  # proposals made after healing
        self.final_applied = False
        self.final_term: int | None = None
        self._events: list[tuple[int, int, int, object]] = []
        self._logs_changed = False  # since the last _check_electability
        self._seq = 0
        for node in self.nodes.values():
            self._start(node)
        self._schedule(rng.randrange(self.fault_every_ms), _FAULT, None)
        self._schedule(rng.randrange(self.tick_ms), _CLIENT, None)
        self._schedule(self.fault_phase_ms, _HEAL, None)

    def run(self) -> None:
        try:
            self._run()
        except InvariantViolation as error:
            raise InvariantViolation(f"{error}\n{self.describe()}") from None
        except Exception as error:  # the core broke: keep its traceback
            error.add_note(self.describe())
            raise

    def _run(self) -> None:
        deadline_ms = self.fault_phase_ms + 300 * self.config.election_timeout_ms
        while self._events:
            time_ms, _, kind, payload = heapq.heappop(self._events)
            if time_ms > deadline_ms:
                break
            self.now_ms = time_ms
            self._handle(kind, payload)
            if not self.faulty and self._converged():
                self._check_final()
                return
        raise InvariantViolation(
            f"no convergence {deadline_ms - self.fault_phase_ms} ms after healing"
        )

    def _handle(self, kind: int, payload: object) -> None:
        if kind == _DELIVER:
            message: Message = payload  # type: ignore[assignment]
            node = self.nodes[message.recipient]
            if node.core is not None and self.blocked[message.sender, message.recipient] <= 0:
                self.trace.append((self.now_ms, "deliver", message))
                node.core.step(message, self.now_ms)
                self._drain(node)
        elif kind == _TICK:
            node_id, incarnation = payload  # type: ignore[misc]
            node = self.nodes[node_id]
            if node.core is not None and node.incarnation == incarnation:
                node.core.tick(self.now_ms)
                self._drain(node)
                self._schedule(self.tick_ms, _TICK, payload)
        elif kind == _CLIENT:
            self._client()
        elif kind == _FAULT and self.faulty:
            self._fault()
            self._schedule(self.rng.randrange(1, self.fault_every_ms), _FAULT, None)
        elif kind == _RESTART:
            node = self.nodes[payload]  # type: ignore[index]
            if node.core is None:
                self._start(node)
        elif kind == _UNBLOCK:
            self.blocked.subtract(payload)  # type: ignore[arg-type]
        elif kind == _HEAL:
            self._heal()
        elif kind == _PERSISTED:
            core, ready = payload  # type: ignore[misc]
            node = self.nodes[core.node_id]
            if node.core is core:  # else it crashed before the disk was done
                if self._finish(node, core, ready):
                    self._drain(node)
                self._check_electability()

    def _schedule(self, delay_ms: int, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (self.now_ms + delay_ms, self._seq, kind, payload))

    # -- a node and its shell ---------------------------------------------------------

    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        rng = Random(self.seed * 7919 + node.node_id * 104729 + node.incarnation)
        disk = node.disk
        node.core = RaftNode(
            node.node_id, self.voters, disk.restored(), self.config, rng, self.now_ms
        )
        snapshot = disk.snapshot
        node.encoded = bytearray(snapshot.data if snapshot is not None else b"")
        node.machine = decode_machine(bytes(node.encoded))
        node.applied_term = snapshot.term if snapshot is not None else 0
        node.seen_commit = node.core.commit_index
        node.led_term = None
        self.trace.append((self.now_ms, "start", node.node_id))
        base_term = snapshot.term if snapshot is not None else 0
        self.history.check_log(node.node_id, base_term, tuple(disk.entries))
        first_tick_ms = self.rng.randrange(1, self.tick_ms + 1)  # nodes tick out of step
        self._schedule(first_tick_ms, _TICK, (node.node_id, node.incarnation))

    def _crash(self, node: SimNode, where: str) -> None:
        self.trace.append((self.now_ms, "crash " + where, node.node_id))
        node.core = None
        if self.faulty:
            delay_ms = self.rng.randrange(1, 6 * self.config.election_timeout_ms)
            self._schedule(delay_ms, _RESTART, node.node_id)

    def _drain(self, node: SimNode) -> None:
        """Take the node's Readies as the shell does. With a slow disk the Ready is
        finished later (_PERSISTED) and the node meanwhile steps, ticks and proposes."""
        handled = False
        while node.core is not None:
            core = node.core
            if self._after_step(node, core):
                self._crash(node, "leader that just committed")
                break
            if not core.has_ready():
                break
            ready = core.ready()
            handled = True
            if ready.entries:
                prev_term = core.term_at(ready.entries[0].index - 1)
                self.history.check_entries(node.node_id, prev_term, ready.entries)
            if self.fsync_ms:
                self._schedule(self.rng.randint(1, self.fsync_ms), _PERSISTED, (core, ready))
                break
            if not self._finish(node, core, ready):
                break
        if handled:
            self._check_electability()

    def _finish(self, node: SimNode, core: RaftNode, ready: Ready) -> bool:
        """Persist, send, apply and advance `ready`, maybe crashing on the way; False if
        the node crashed."""
        crash, node.doom = (node.doom if self.faulty else None), None
        if crash is None and self.faulty and self.rng.random() < self.crash_in_ready:
            crash = self.rng.choice(_CRASH_POINTS)
        if crash == "before persist":
            self._crash(node, crash)
            return False
        entries = ready.entries
        if crash == "partial persist":
            entries = entries[: self.rng.randrange(len(entries) + 1)]
        if ready.hard_state is not None:
            self.history.check_hard_state(node.node_id, node.disk.hard_state, ready.hard_state)
        node.disk.save(ready, entries)
        if entries or ready.snapshot or ready.truncate_from is not None or ready.committed:
            self._logs_changed = True  # stored logs or commit indexes moved
        if crash in ("partial persist", "after persist"):
            self._crash(node, crash)
            return False
        messages = ready.messages
        if crash == "mid send":
            messages = messages[: self.rng.randrange(len(messages) + 1)]
        for message in messages:
            self._send(message)
        if crash == "mid send":
            self._crash(node, crash)
            return False
        self._apply(node, ready)
        if crash == "after apply":
            self._crash(node, crash)
            return False
        core.advance(ready)
        self._maybe_compact(node, core)
        return True

    def _send(self, message: Message) -> None:
        rng = self.rng
        if self.faulty and rng.random() < self.loss:
            return
        copies = 2 if self.faulty and rng.random() < self.duplicate else 1
        for _ in range(copies):
            delay_ms = rng.randint(1, max(1, self.max_delay_ms))
            if self.faulty and rng.random() < self.long_delay:
                delay_ms += rng.randrange(4 * self.config.election_timeout_ms)
            self._schedule(delay_ms, _DELIVER, message)

    def _apply(self, node: SimNode, ready: Ready) -> None:
        if ready.apply_snapshot is not None:
            snapshot = ready.apply_snapshot
            node.encoded = bytearray(snapshot.data)
            node.machine = decode_machine(snapshot.data)
            node.applied_term = snapshot.term
            self.history.check_snapshot(node.node_id, snapshot, node.machine)
        for entry in ready.committed:
            self.history.check_apply(node.node_id, len(node.machine), entry)
            node.machine.append(entry.data)
            node.encoded += len(entry.data).to_bytes(4, "big") + entry.data
            node.applied_term = entry.term
            if entry.data in self.finals:
                self.final_applied = True

    def _maybe_compact(self, node: SimNode, core: RaftNode) -> None:
        applied_index = len(node.machine)
        if applied_index - core.snapshot_index >= self.compact_every:
            snapshot = Snapshot(applied_index, node.applied_term, bytes(node.encoded))
            node.disk.compact(snapshot)
            core.compact(snapshot)

    # -- checks ---------------------------------------------------------------------

    def _after_step(self, node: SimNode, core: RaftNode) -> bool:
        """Check the node's new state; True if it is a leader that just committed and
        should crash now (its own entries may not be on a majority yet)."""
        seen_commit = node.seen_commit
        if core.role is not Role.LEADER and core.commit_index == seen_commit:
            return False  # nothing to check
        history = self.history
        history.check_leader(core)
        node.seen_commit = history.note_commit(core, seen_commit)
        self._logs_changed |= node.seen_commit > seen_commit
        if core.role is not Role.LEADER:
            return False
        if node.led_term != core.term:
            node.led_term = core.term
            self.trace.append((self.now_ms, "leader", (core.node_id, core.term)))
            history.check_new_leader(core)
            if self.faulty and self.rng.random() < self.crash_new_leader:
                node.doom = self.rng.choice(("after persist", "mid send"))
        if not self.faulty:
            if not self.final_applied and self.final_term != core.term:
                self._propose_final(core)
            return False
        return node.seen_commit > seen_commit and self.rng.random() < self.crash_on_commit

    def _check_electability(self) -> None:
        if not self._logs_changed:
            return
        self._logs_changed = False
        history = self.history
        index = history.max_committed
        term = history.committed.get(index)
        if term is None:
            return
        lacking: list[tuple[int, str, tuple[int, int]]] = []
        for node in self.nodes.values():
            if not node.disk.holds(index, term):
                lacking.append((node.node_id, "stored log", node.disk.tail))
            core = node.core
            if core is not None and core.snapshot_index < index and core.term_at(index) != term:
                lacking.append((node.node_id, "log", (core.last_term, core.last_index)))
        if lacking:
            history.check_unelectable([node.disk.tail for node in self.nodes.values()], lacking)

    # -- clients and faults ---------------------------------------------------------

    def _client(self) -> None:
        """Proposals, mostly to the node some node believes leads."""
        rng = self.rng
        if self.faulty:
            self._schedule(rng.randrange(1, 2 * self.tick_ms), _CLIENT, None)
        node = self.nodes[rng.choice(self.voters)]
        if node.core is not None and node.core.leader_id is not None and rng.random() < 0.8:
            node = self.nodes[node.core.leader_id]
        if node.core is None:
            return
        for _ in range(rng.choice((1, 1, 1, 5, 20))):
            self.proposed += 1
            payload = f"s{self.seed}p{self.proposed}".encode()
            if node.core.propose(payload, self.now_ms) is None:
                break
            self.trace.append((self.now_ms, "proposed", (node.node_id, payload)))
        self._drain(node)

    def _fault(self) -> None:
        """One fault; crashed nodes restart and cut links heal after a while."""
        rng = self.rng
        choice = rng.randrange(6)
        links: list[tuple[int, int]] = []
        if choice == 0:
            alive = [node for node in self.nodes.values() if node.core is not None]
            if alive:
                self._crash(rng.choice(alive), "between steps")
        elif choice == 1:
            side = set(rng.sample(self.voters, rng.randrange(1, self.size)))
            links = [(a, b) for a in self.voters for b in self.voters if (a in side) != (b in side)]
            self.trace.append((self.now_ms, "partition", sorted(side)))
        elif choice == 2:
            sender, recipient = rng.sample(self.voters, 2)
            links = [(sender, recipient)]
            self.trace.append((self.now_ms, "one-way cut", links[0]))
        elif choice == 3:
            for node in self.nodes.values():
                if node.core is not None and node.core.role is Role.LEADER:
                    target = rng.choice((None, *self.voters))
                    self.trace.append((self.now_ms, "transfer", (node.node_id, target)))
                    node.core.transfer_leadership(target, self.now_ms)
                    self._drain(node)
        elif choice == 4:
            self.loss = rng.choice((0.0, 0.02, 0.1, 0.3))
        else:
            down = [node for node in self.nodes.values() if node.core is None]
            if down:
                self._start(rng.choice(down))
        if links:
            self.blocked.update(links)
            timeout_ms = self.config.election_timeout_ms
            self._schedule(rng.randrange(timeout_ms, 6 * timeout_ms), _UNBLOCK, tuple(links))

    def _heal(self) -> None:
        self.trace.append((self.now_ms, "heal all", None))
        self.faulty = False
        self.blocked = Counter()
        for node in self.nodes.values():
            if node.core is None:
                self._start(node)
            elif node.core.role is Role.LEADER:
                self._propose_final(node.core)

    def _propose_final(self, core: RaftNode) -> None:
        """After healing, every new leader proposes once, until one such proposal applies."""
        payload = f"s{self.seed}final{len(self.finals)}".encode()
        if self.final_term != core.term and core.propose(payload, self.now_ms) is not None:
            self.final_term = core.term
            self.finals.add(payload)
            self.trace.append((self.now_ms, "proposed final", core.node_id))
            self._drain(self.nodes[core.node_id])

    # -- the end --------------------------------------------------------------------

    def _converged(self) -> bool:
        if not self.final_applied:
            return False
        cores = [node.core for node in self.nodes.values()]
        leaders = [core for core in cores if core is not None and core.role is Role.LEADER]
        if len(leaders) != 1 or leaders[0].commit_index != leaders[0].last_index:
            return False
        commit_index = leaders[0].commit_index
        return all(len(node.machine) == commit_index for node in self.nodes.values())

    def _check_final(self) -> None:
        first = self.nodes[self.voters[0]].machine
        for node in self.nodes.values():
            if node.machine != first:
                raise InvariantViolation(f"nodes {self.voters[0]} and {node.node_id} differ")
            assert node.core is not None
            base_term = node.core.term_at(node.core.snapshot_index)
            self.history.check_log(node.node_id, base_term or 0, node.core.log_entries())
        for index, data in self.history.applied.items():
            if index > len(first) or first[index - 1] != data:
                raise InvariantViolation(f"{data!r} was applied at {index}, is missing at the end")

    def describe(self) -> str:
        lines = [
            f"seed {self.seed}: {self.size} voters, {self.config}, loss {self.loss}, "
            f"duplicate {self.duplicate}, crash in ready {self.crash_in_ready}, on commit "
            f"{self.crash_on_commit}, new leader {self.crash_new_leader}, compact every "
            f"{self.compact_every}; at {self.now_ms} ms:"
        ]
        for node in self.nodes.values():
            core = node.core
            if core is None:
                lines.append(f"  node {node.node_id}: down, stored log ends at {node.disk.tail}")
            else:
                lines.append(
                    f"  node {node.node_id}: {core.role.name} term {core.term} leader "
                    f"{core.leader_id} last {core.last_index} commit {core.commit_index} "
                    f"applied {len(node.machine)}"
                )
        lines.append("last events:")
        lines.extend(f"  {time_ms:>6} {what} {detail}" for time_ms, what, detail in self.trace)
        return "\n".join(lines)


def run_seed(seed: int) -> RaftSim:
    sim = RaftSim(seed)
    sim.run()
    return sim
