"""Judge a fault run's History: a pure function, no I/O and no clock.

check(history) finds:
1. LOST_WRITE: an acknowledged write that is not in the final log at the offset it was
   acknowledged with (one acknowledged without an offset, an implicit ack, must be in
   its partition's final log; its offset there is then used by the other checks);
2. LOST_READ: a record a consumer read (partition, offset, value) that is not in the final
   log at that offset;
3. DUPLICATE: a value at more than one place in the final log (the producers are
   idempotent and every value is written once);
4. BACKWARDS_READ: a consumer whose reads of one partition are not strictly increasing;
5. PRODUCER_REORDER: a producer whose acknowledged writes to one partition do not have
   offsets increasing with its sequence numbers;
6. UNDER_MIN_ISR_ACK: a write acknowledged although, for the whole time from its send to
   its acknowledgement, fewer than min.insync.replicas of its partition's replicas were
   up (never killed or paused over all of it), or no replica could have reached that many
   (itself included) across the network's cuts, which acks=all forbids: the record must
   be held by min.insync.replicas replicas, each fetching it from the leader;
7. PHANTOM: a record read or in the final log that no producer sent to that partition;
8. NO_WRITE_AFTER_HEAL: a partition with enough live replicas that acknowledged no write
   sent after a heal of the network within RECOVERY_BOUND_S, or that did and then, before
   the next fault, failed a write or kept one waiting longer than that (recovery.py); the
   time each partition took after each heal is in CheckResult.recoveries.

Failed and unknown writes may or may not be in the final log (the broker may have stored
one whose answer was lost); such writes are counted, never reported as anomalies, and so
are producers' fatal errors (a client that gave up is a failure the application sees,
not lost data). Every anomaly names the faults around its time.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from enum import Enum
from itertools import pairwise

from .history import (
    Acked,
    Failed,
    FatalError,
    FinalRecord,
    History,
    NetworkChanged,
    NodeChanged,
    Read,
    Sent,
)
from .recovery import PartitionRecovery, Recovery, Verdict, recoveries

HEAL_SLACK_S = 0.5
"""A change of the network is stamped once its rules are in place, so a link may carry a
fetch a moment before the heal that restored it is stamped: each state of the network is
taken to start this much before its stamp."""
FAULTS_BEFORE_S = 15.0
FAULTS_AFTER_S = 5.0
MAX_FAULTS_SHOWN = 8


class AnomalyKind(Enum):
    LOST_WRITE = "lost acknowledged write"
    LOST_READ = "read record later lost"
    DUPLICATE = "duplicate in the final log"
    BACKWARDS_READ = "consumer read went backwards"
    PRODUCER_REORDER = "producer's writes reordered"
    UNDER_MIN_ISR_ACK = "acknowledged below min.insync.replicas"
    PHANTOM = "record no producer sent"
    NO_WRITE_AFTER_HEAL = "no write taken after a heal"


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: AnomalyKind
    partition: int
    offset: int | None
    value: str | None
    at_s: float | None
    """When it showed: the acknowledgement, the read, the send of a duplicate."""
    detail: str
    faults: tuple[str, ...] = ()
    """The faults from FAULTS_BEFORE_S before to FAULTS_AFTER_S after `at_s`."""

    def describe(self) -> str:
        where = f"p{self.partition}" + ("" if self.offset is None else f"@{self.offset}")
        what = "" if self.value is None else f" {self.value!r}"
        when = "" if self.at_s is None else f" at {self.at_s:.2f}s"
        line = f"{where}{what}{when}: {self.detail}"
        if self.faults:
            line += "\n      faults: " + "; ".join(self.faults)
        return line


@dataclass(frozen=True, slots=True)
class Counts:
    writes_sent: int
    writes_ok: int
    writes_failed: int
    writes_unknown: int
    reads: int
    final_records: int
    failed_but_present: int
    unknown_but_present: int
    producer_fatal_errors: int

    def describe(self) -> str:
        return (
            f"writes: {self.writes_sent} sent, {self.writes_ok} ok, "
            f"{self.writes_failed} failed ({self.failed_but_present} in the log anyway), "
            f"{self.writes_unknown} unknown ({self.unknown_but_present} in the log); "
            f"{self.reads} reads; {self.final_records} records in the final log; "
            f"{self.producer_fatal_errors} fatal producer errors"
        )


@dataclass(frozen=True, slots=True)
class CheckResult:
    anomalies: tuple[Anomaly, ...]
    counts: Counts
    recoveries: tuple[Recovery, ...] = ()
    """How each partition came back from each heal of the network."""

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def of_kind(self, kind: AnomalyKind) -> list[Anomaly]:
        return [anomaly for anomaly in self.anomalies if anomaly.kind is kind]

    def kinds(self) -> Counter[AnomalyKind]:
        return Counter(anomaly.kind for anomaly in self.anomalies)

    def summary(self, per_kind: int = 5) -> str:
        kinds = self.kinds()
        listed = ", ".join(f"{kind.value}: {n}" for kind, n in kinds.items())
        lines = [f"{len(self.anomalies)} anomalies ({listed or 'none'})", self.counts.describe()]
        for kind in kinds:
            found = self.of_kind(kind)
            lines.append(f"{kind.value} ({len(found)}):")
            lines += [f"  {anomaly.describe()}" for anomaly in found[:per_kind]]
            if len(found) > per_kind:
                lines.append(f"  ... and {len(found) - per_kind} more")
        if self.recoveries:
            lines.append(self.recovery_report())
        return "\n".join(lines)

    def recovery_report(self) -> str:
        """One line per heal of the network: how long each partition took to take a
        write again, or why that was not measured."""
        if not self.recoveries:
            return "no heals of the network"
        lines = ["recovery after each heal of the network (first write acknowledged):"]
        lines += [f"  {recovery.describe()}" for recovery in self.recoveries]
        return "\n".join(lines)


def check(history: History) -> CheckResult:
    sent = {e.value: e for e in history.events if isinstance(e, Sent)}
    final = _FinalLog(history.final_log)
    acked = [_resolve(e, final) for e in history.events if isinstance(e, Acked)]
    failed = {e.value: e for e in history.events if isinstance(e, Failed)}
    reads = [e for e in history.events if isinstance(e, Read)]
    faults = _Faults(
        [e for e in history.events if isinstance(e, NodeChanged)],
        [e for e in history.events if isinstance(e, NetworkChanged)],
    )
    healed = recoveries(history)

    anomalies: list[Anomaly] = []
    anomalies += _lost_writes(acked, final, faults)
    anomalies += _lost_reads(reads, final, faults)
    anomalies += _duplicates(final, sent, faults)
    anomalies += _backwards_reads(reads, faults)
    anomalies += _reordered_writes(acked, sent, faults)
    anomalies += _under_min_isr_acks(acked, sent, history, faults)
    anomalies += _phantoms(reads, final, sent, faults)
    anomalies += _not_recovered(healed, faults)

    acked_values = {e.value for e in acked}
    unknown = set(sent) - acked_values - set(failed)
    counts = Counts(
        writes_sent=len(sent),
        writes_ok=len(acked_values),
        writes_failed=len(failed),
        writes_unknown=len(unknown),
        reads=len(reads),
        final_records=final.size,
        failed_but_present=sum(1 for value in failed if final.places(value)),
        unknown_but_present=sum(1 for value in unknown if final.places(value)),
        producer_fatal_errors=sum(1 for e in history.events if isinstance(e, FatalError)),
    )
    return CheckResult(tuple(anomalies), counts, healed)


# --- the final log and the faults, indexed ------------------------------------------------


class _FinalLog:
    def __init__(self, final_log: dict[int, list[FinalRecord]]) -> None:
        self.by_offset = {
            partition: {record.offset: record.value for record in records}
            for partition, records in final_log.items()
        }
        self.records = [
            (partition, record) for partition, records in final_log.items() for record in records
        ]
        self._places: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for partition, record in self.records:
            self._places[record.value].append((partition, record.offset))
        self.ends = {
            partition: (records[-1].offset + 1 if records else 0)
            for partition, records in final_log.items()
        }

    @property
    def size(self) -> int:
        return len(self.records)

    def at(self, partition: int, offset: int) -> str | None:
        return self.by_offset.get(partition, {}).get(offset)

    def places(self, value: str) -> list[tuple[int, int]]:
        return self._places.get(value, [])

    def explain_missing(self, partition: int, offset: int, value: str) -> str:
        """What the final log has instead of `value` at partition/offset."""
        there = self.at(partition, offset)
        if there is not None:
            holds = f"the final log has {there!r} there"
        else:
            holds = (
                f"the final log of p{partition} ends before it (at {self.ends.get(partition, 0)})"
            )
        places = self.places(value)
        if places:
            elsewhere = ", ".join(f"p{p}@{o}" for p, o in places)
            return f"{holds}; the value is at {elsewhere}"
        return f"{holds}; the value is nowhere in it"


class _Faults:
    """The node and network changes, for naming the faults near a time; the node changes
    for down windows."""

    def __init__(self, changes: list[NodeChanged], network: list[NetworkChanged]) -> None:
        self.changes = sorted(changes, key=lambda change: change.at_s)
        self.network = sorted(network, key=lambda change: change.at_s)
        self.down: dict[int, list[tuple[float, float]]] = defaultdict(list)
        down_since: dict[int, float] = {}
        for change in self.changes:
            if change.change.takes_down and change.node not in down_since:
                down_since[change.node] = change.at_s
            elif change.change.brings_up and change.node in down_since:
                self.down[change.node].append((down_since.pop(change.node), change.at_s))
        for node, since in down_since.items():
            self.down[node].append((since, math.inf))
        # The states of the network, (since, until, cuts), each from HEAL_SLACK_S before
        # its stamp to the next stamp (so neighbours overlap, in the replicas' favour).
        stamps = [change.at_s for change in self.network]
        self._states: list[tuple[float, float, frozenset[tuple[int, int]]]] = [
            (since - HEAL_SLACK_S, until, frozenset(cuts))
            for since, until, cuts in zip(
                [-math.inf, *stamps],
                [*stamps, math.inf],
                [(), *(change.cuts for change in self.network)],
                strict=True,
            )
        ]
        self._state_ends = [until for _, until, _ in self._states]

    def at(
        self,
        kind: AnomalyKind,
        partition: int,
        offset: int | None,
        value: str | None,
        at_s: float | None,
        detail: str,
    ) -> Anomaly:
        """An anomaly, with the faults near the time it showed."""
        return Anomaly(kind, partition, offset, value, at_s, detail, self.near(at_s))

    def anomaly(self, kind: AnomalyKind, event: Acked | Read, detail: str) -> Anomaly:
        """An anomaly shown by one acknowledgement or read."""
        return self.at(kind, event.partition, event.offset, event.value, event.at_s, detail)

    def near(self, at_s: float | None) -> tuple[str, ...]:
        if at_s is None:
            return ()
        close: list[NodeChanged | NetworkChanged] = [
            c
            for c in [*self.changes, *self.network]
            if at_s - FAULTS_BEFORE_S <= c.at_s <= at_s + FAULTS_AFTER_S
        ]
        close.sort(key=lambda c: abs(c.at_s - at_s))
        shown = sorted(close[:MAX_FAULTS_SHOWN], key=lambda c: c.at_s)
        return tuple(f"{c.at_s:.2f}s {_what(c)} ({c.why})" for c in shown)

    def up_at_some_time(self, node: int, start_s: float, end_s: float) -> bool:
        """Whether `node` was up at some moment from start_s to end_s (down windows are
        [killed or paused, restarted or resumed))."""
        return not any(
            since <= start_s and end_s < until for since, until in self.down.get(node, [])
        )

    def reachable(self, replicas: tuple[int, ...], start_s: float, end_s: float) -> list[int]:
        """The most replicas one of them could have reached (itself included) at some
        moment from start_s to end_s: up then, and not cut from it by the network state
        of that moment. A record sent at start_s and acknowledged at end_s with acks=all
        was fetched from its leader by every other replica that holds it."""
        reached: dict[int, set[int]] = {node: set() for node in replicas}
        first = max(0, bisect_right(self._state_ends, start_s) - 1)
        for since, until, cuts in self._states[first:]:
            if since > end_s:
                break
            low, high = max(since, start_s), min(until, end_s)
            if low > high:
                continue
            up = [node for node in replicas if self.up_at_some_time(node, low, high)]
            for leader in up:
                reached[leader].update(
                    node for node in up if (min(leader, node), max(leader, node)) not in cuts
                )
        return sorted(max(reached.values(), key=len, default=set()))


def _what(change: NodeChanged | NetworkChanged) -> str:
    if isinstance(change, NetworkChanged):
        return change.describe()
    return f"node {change.node} {change.change.value}"


# --- the checks --------------------------------------------------------------------------


def _resolve(ack: Acked, final: _FinalLog) -> Acked:
    """An implicit ack (no offset) with the offset its value has in the final log."""
    if ack.offset is not None:
        return ack
    offsets = [o for p, o in final.places(ack.value) if p == ack.partition]
    return replace(ack, offset=offsets[0]) if offsets else ack


def _lost_writes(acked: list[Acked], final: _FinalLog, faults: _Faults) -> list[Anomaly]:
    found = []
    for ack in acked:
        if ack.offset is None:
            detail = (
                f"{ack.producer} was told it was written (without an offset); "
                f"p{ack.partition} of the final log does not have it"
            )
            found.append(faults.anomaly(AnomalyKind.LOST_WRITE, ack, detail))
            continue
        if final.at(ack.partition, ack.offset) == ack.value:
            continue
        detail = (
            f"{ack.producer} was told offset {ack.offset}; "
            f"{final.explain_missing(ack.partition, ack.offset, ack.value)}"
        )
        found.append(faults.anomaly(AnomalyKind.LOST_WRITE, ack, detail))
    return found


def _lost_reads(reads: list[Read], final: _FinalLog, faults: _Faults) -> list[Anomaly]:
    found = []
    for read in reads:
        if final.at(read.partition, read.offset) == read.value:
            continue
        detail = (
            f"{read.consumer} read it; "
            f"{final.explain_missing(read.partition, read.offset, read.value)}"
        )
        found.append(faults.anomaly(AnomalyKind.LOST_READ, read, detail))
    return found


def _duplicates(final: _FinalLog, sent: dict[str, Sent], faults: _Faults) -> list[Anomaly]:
    found = []
    counts = Counter(record.value for _, record in final.records)
    for value, times in counts.items():
        if times < 2:
            continue
        places = final.places(value)
        partition, offset = places[0]
        at_s = sent[value].at_s if value in sent else None
        where = ", ".join(f"p{p}@{o}" for p, o in places)
        found.append(
            faults.at(
                AnomalyKind.DUPLICATE,
                partition,
                offset,
                value,
                at_s,
                f"{times} times in the final log: {where} (sent once)",
            )
        )
    return found


def _backwards_reads(reads: list[Read], faults: _Faults) -> list[Anomaly]:
    found = []
    last: dict[tuple[str, int], Read] = {}
    for read in reads:
        key = (read.consumer, read.partition)
        before = last.get(key)
        last[key] = read
        if before is None or read.offset > before.offset:
            continue
        detail = (
            f"{read.consumer} read offset {read.offset} after offset {before.offset} "
            f"({before.value!r} at {before.at_s:.2f}s)"
        )
        found.append(faults.anomaly(AnomalyKind.BACKWARDS_READ, read, detail))
    return found


def _reordered_writes(acked: list[Acked], sent: dict[str, Sent], faults: _Faults) -> list[Anomaly]:
    found = []
    by_producer: dict[tuple[str, int], list[tuple[int, int, Acked]]] = defaultdict(list)
    for ack in acked:
        if ack.value in sent and ack.offset is not None:
            write = (sent[ack.value].seq, ack.offset, ack)
            by_producer[(ack.producer, ack.partition)].append(write)
    for writes in by_producer.values():
        writes.sort(key=lambda write: write[0])
        for (seq_a, offset_a, a), (seq_b, offset_b, b) in pairwise(writes):
            if offset_b > offset_a:
                continue
            detail = (
                f"{b.producer}'s write #{seq_b} got offset {offset_b}, not after its "
                f"write #{seq_a} {a.value!r} at offset {offset_a}"
            )
            found.append(faults.anomaly(AnomalyKind.PRODUCER_REORDER, b, detail))
    return found


def _under_min_isr_acks(
    acked: list[Acked], sent: dict[str, Sent], history: History, faults: _Faults
) -> list[Anomaly]:
    found = []
    needed = history.setup.min_insync_replicas
    for ack in acked:
        send = sent.get(ack.value)
        replicas = history.setup.replicas.get(ack.partition, ())
        if send is None or not replicas:
            continue
        up = [n for n in replicas if faults.up_at_some_time(n, send.at_s, ack.at_s)]
        reached = faults.reachable(replicas, send.at_s, ack.at_s)
        if len(reached) >= needed:  # the replicas reached were up, so enough were
            continue
        if len(up) < needed:
            why = f"only nodes {up} of the replicas {list(replicas)} were up"
        else:
            why = (
                f"no replica of {list(replicas)} could reach more than nodes {reached} "
                "across the network's cuts"
            )
        detail = (
            f"sent at {send.at_s:.2f}s and acknowledged at offset {ack.offset}, while "
            f"{why} (min.insync.replicas={needed})"
        )
        found.append(faults.anomaly(AnomalyKind.UNDER_MIN_ISR_ACK, ack, detail))
    return found


def _phantoms(
    reads: list[Read], final: _FinalLog, sent: dict[str, Sent], faults: _Faults
) -> list[Anomaly]:
    found = []
    seen: set[tuple[int, int, str]] = set()
    places: list[tuple[int, int, str, float | None, str]] = [
        (r.partition, r.offset, r.value, r.at_s, f"{r.consumer} read it") for r in reads
    ]
    places += [(p, r.offset, r.value, None, "in the final log") for p, r in final.records]
    for partition, offset, value, at_s, how in places:
        send = sent.get(value)
        if (send is not None and send.partition == partition) or (
            (partition, offset, value) in seen
        ):
            continue
        seen.add((partition, offset, value))
        why = "no producer sent it" if send is None else f"it was sent to p{send.partition}"
        found.append(
            faults.at(AnomalyKind.PHANTOM, partition, offset, value, at_s, f"{how}, but {why}")
        )
    return found


def _stall(partition: PartitionRecovery) -> str:
    if partition.verdict is Verdict.STALLED:
        assert partition.took_s is not None
        return (
            f"it took a write {partition.took_s:.2f} s after the heal, then stalled: "
            f"{partition.detail}"
        )
    return partition.detail


def _not_recovered(healed: tuple[Recovery, ...], faults: _Faults) -> list[Anomaly]:
    return [
        faults.at(
            AnomalyKind.NO_WRITE_AFTER_HEAL,
            partition.partition,
            None,
            None,
            recovery.heal_s,
            f"healed at {recovery.heal_s:.2f}s ({recovery.why}): {_stall(partition)}",
        )
        for recovery in healed
        for partition in recovery.partitions
        if partition.verdict in (Verdict.NOT_RECOVERED, Verdict.STALLED)
    ]
