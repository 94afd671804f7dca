"""Does every partition take writes again after each heal of the network? A pure function
of a History: no I/O, no clock.

A heal is a NetworkChanged back to the whole network (after a cut, at the end of a
flapping spell, or when the run heals everything). From then on the cluster must recover
with no operator action: each partition that has at least min.insync.replicas live
replicas must acknowledge an acks=all write sent after the heal within RECOVERY_BOUND_S,
and from then on until the next fault keep answering: no write sent to it may fail or
wait longer than RECOVERY_BOUND_S for its acknowledgement (a write the run never heard
about, such as one of a producer replaced after a fatal error, is not counted).
A replica is live while its node is up: not killed or paused, and once restarted, ready
again. The bound runs from the heal, or from the moment enough replicas are live, if
that is later (a node killed during the cut may still be starting).

Each partition of each heal gets a verdict:

| verdict | when |
|---|---|
| RECOVERED | a write sent after the heal was acknowledged in time: `took_s` after the heal |
| NOT_RECOVERED | none within the bound, although enough replicas were live (an anomaly) |
| STALLED | it recovered, but a later write failed or waited longer than the bound (an anomaly) |
| TOO_FEW_REPLICAS | fewer than min.insync.replicas replicas were live (no write may be taken) |
| INTERRUPTED | the next fault (a cut, a kill, a pause) or the end of the run came first |

The runner keeps the producers writing after the last heal until every partition took a
write or the bound has passed, so the last heal of a run is always measured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

from .history import Acked, Failed, History, NetworkChanged, NodeChange, NodeChanged, Sent

RECOVERY_BOUND_S = 15.0


class Verdict(Enum):
    RECOVERED = "recovered"
    NOT_RECOVERED = "took no write"
    STALLED = "stalled after recovering"
    TOO_FEW_REPLICAS = "too few live replicas"
    INTERRUPTED = "not measured"


@dataclass(frozen=True, slots=True)
class PartitionRecovery:
    partition: int
    verdict: Verdict
    took_s: float | None
    """Seconds from the heal to the first acknowledgement of a write sent after it (when
    there was one before the next fault)."""
    detail: str

    def describe(self) -> str:
        if self.verdict is Verdict.RECOVERED:
            assert self.took_s is not None
            return f"p{self.partition} {self.took_s:.2f}s"
        if self.verdict is Verdict.STALLED:
            assert self.took_s is not None
            return (
                f"p{self.partition} {self.took_s:.2f}s, then {self.verdict.value} ({self.detail})"
            )
        return f"p{self.partition} {self.verdict.value} ({self.detail})"


@dataclass(frozen=True, slots=True)
class Recovery:
    """One heal and how each partition came back from it."""

    heal_s: float
    why: str
    partitions: tuple[PartitionRecovery, ...]

    def describe(self) -> str:
        parts = ", ".join(p.describe() for p in self.partitions)
        return f"{self.heal_s:.2f}s heal ({self.why}): {parts}"

    @property
    def slowest_s(self) -> float | None:
        """The longest recovery of a partition that recovered."""
        times = [p.took_s for p in self.partitions if p.took_s is not None]
        return max(times, default=None)


class _Liveness:
    """Each node's state over time: up, down (killed or paused) or starting (restarted,
    not yet ready). Nodes start up."""

    def __init__(self, changes: list[NodeChanged]) -> None:
        self.changes: dict[int, list[tuple[float, bool]]] = defaultdict(list)
        for change in sorted(changes, key=lambda c: c.at_s):
            live = change.change in (NodeChange.READY, NodeChange.RESUMED)
            self.changes[change.node].append((change.at_s, live))
        self.times = sorted({at_s for node in self.changes.values() for at_s, _ in node})

    def live(self, node: int, at_s: float) -> bool:
        state = True
        for when, live in self.changes.get(node, []):
            if when > at_s:
                break
            state = live
        return state

    def enough_from(
        self, replicas: tuple[int, ...], needed: int, start_s: float, end_s: float
    ) -> float | None:
        """The first moment from `start_s` to `end_s` at which at least `needed` replicas
        are live, or None."""
        for at_s in [start_s, *(t for t in self.times if start_s < t <= end_s)]:
            if sum(self.live(n, at_s) for n in replicas) >= needed:
                return at_s
        return None


def recoveries(history: History, bound_s: float = RECOVERY_BOUND_S) -> tuple[Recovery, ...]:
    """How every partition came back from every heal of the network."""
    network = sorted(
        (e for e in history.events if isinstance(e, NetworkChanged)), key=lambda e: e.at_s
    )
    heals = [
        change
        for before, change in pairwise([None, *network])
        if change is not None and not change.cuts and before is not None and before.cuts
    ]
    if not heals:
        return ()
    node_changes = [e for e in history.events if isinstance(e, NodeChanged)]
    liveness = _Liveness(node_changes)
    disruptions = sorted(
        [e.at_s for e in network if e.cuts] + [e.at_s for e in node_changes if e.change.takes_down]
    )
    sent = {e.value: e for e in history.events if isinstance(e, Sent)}
    last_client_s = max(
        (e.at_s for e in history.events if isinstance(e, Sent | Acked | Failed)), default=0.0
    )
    acked = [e for e in history.events if isinstance(e, Acked)]
    answers = _Answers(history)
    found = []
    for heal in heals:
        next_fault_s = min((t for t in disruptions if t > heal.at_s), default=math.inf)
        sent_after = any(heal.at_s <= e.at_s <= next_fault_s for e in sent.values())
        window = _Window(heal.at_s, next_fault_s, last_client_s, sent_after, bound_s)
        first_acks: dict[int, float] = {}
        for ack in acked:
            send = sent.get(ack.value)
            if send is None or send.at_s < heal.at_s or ack.at_s < heal.at_s:
                continue
            if ack.at_s < first_acks.get(ack.partition, math.inf):
                first_acks[ack.partition] = ack.at_s
        partitions = tuple(
            answers.stalls(
                window,
                window.judge(
                    partition,
                    first_acks.get(partition),
                    liveness.enough_from(
                        history.setup.replicas[partition],
                        history.setup.min_insync_replicas,
                        heal.at_s,
                        window.end_s,
                    ),
                    history.setup.replicas[partition],
                ),
            )
            for partition in history.setup.partitions
        )
        found.append(Recovery(heal.at_s, heal.why, partitions))
    return tuple(found)


class _Answers:
    """Every write's send and answer (acknowledged or failed, and when), by partition."""

    def __init__(self, history: History) -> None:
        answered: dict[str, tuple[float, str | None]] = {}
        for event in history.events:
            if isinstance(event, Acked):
                answered.setdefault(event.value, (event.at_s, None))
            elif isinstance(event, Failed):
                answered.setdefault(event.value, (event.at_s, event.error))
        self.writes: dict[int, list[tuple[Sent, tuple[float, str | None] | None]]] = defaultdict(
            list
        )
        for event in history.events:
            if isinstance(event, Sent):
                self.writes[event.partition].append((event, answered.get(event.value)))

    def stalls(self, window: _Window, judged: PartitionRecovery) -> PartitionRecovery:
        """STALLED instead of RECOVERED when a write sent from the recovery to a bound
        before the window's end failed or was acknowledged only after the bound."""
        if judged.verdict is not Verdict.RECOVERED:
            return judged
        assert judged.took_s is not None
        recovered_s = window.heal_s + judged.took_s
        for send, answer in self.writes[judged.partition]:
            if not recovered_s <= send.at_s <= window.end_s - window.bound_s or answer is None:
                continue
            answered_s, error = answer
            waited_s = answered_s - send.at_s
            if error is None and waited_s <= window.bound_s:
                continue
            what = (
                f"failed after {waited_s:.2f} s ({error})"
                if error
                else (f"was acknowledged only {waited_s:.2f} s later")
            )
            detail = (
                f"{send.value!r}, sent {send.at_s - window.heal_s:.2f} s after the heal, {what}"
            )
            return PartitionRecovery(judged.partition, Verdict.STALLED, judged.took_s, detail)
        return judged


@dataclass(frozen=True, slots=True)
class _Window:
    """From a heal to the next fault or the end of the history (the last write sent,
    acknowledged or failed), whichever comes first."""

    heal_s: float
    next_fault_s: float
    last_client_s: float
    sent_after: bool
    """Whether any write was sent from the heal to the next fault."""
    bound_s: float

    @property
    def end_s(self) -> float:
        return min(self.next_fault_s, self.last_client_s)

    def judge(
        self,
        partition: int,
        first_ack_s: float | None,
        enough_s: float | None,
        replicas: tuple[int, ...],
    ) -> PartitionRecovery:
        if enough_s is None:
            return PartitionRecovery(
                partition,
                Verdict.TOO_FEW_REPLICAS,
                None,
                f"fewer than min.insync.replicas of {list(replicas)} were up and ready",
            )
        deadline_s = enough_s + self.bound_s
        if first_ack_s is not None and first_ack_s <= min(deadline_s, self.end_s):
            return PartitionRecovery(partition, Verdict.RECOVERED, first_ack_s - self.heal_s, "")
        if self.end_s < deadline_s or not self.sent_after:
            what = "the next fault" if self.next_fault_s <= self.last_client_s else "the run"
            ended = "came" if what == "the next fault" else "ended"
            detail = f"{what} {ended} {self.end_s - self.heal_s:.2f} s after the heal"
            if not self.sent_after:
                detail = f"no write was sent after the heal; {detail}"
            return PartitionRecovery(partition, Verdict.INTERRUPTED, None, detail)
        if first_ack_s is None:
            late = "none was acknowledged"
        else:
            late = f"the first was acknowledged {first_ack_s - self.heal_s:.2f} s after it"
        since = "" if enough_s == self.heal_s else f" ({enough_s - self.heal_s:.2f} s after it)"
        return PartitionRecovery(
            partition,
            Verdict.NOT_RECOVERED,
            None,
            f"no write sent after the heal was acknowledged within {self.bound_s:g} s of "
            f"enough replicas of {list(replicas)} being up{since}: {late}",
        )
