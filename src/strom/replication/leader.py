"""What a partition's leader knows about its followers: a pure core, no I/O, no clock.

    LeaderState(...) --on_fetch(follower, offset, leader end, now)--> progress
                     --high_watermark(own end, min ISR)--> where consumers may read
                     --lagging(now, lag) / caught_up(hw)--> ISR changes to propose
                     --propose(isr) -> committed(isr, partition epoch) | refused()--> ...

A follower's fetch offset says it holds every record below it (a follower fetches only
after its previous records are appended, and fsynced where the topic asks for that).

The high watermark is the smallest log end among the *maximal* ISR: the committed ISR
plus any member of an ISR change still waiting at the controller. Counting a member
being added makes the watermark wait for it too; counting one being removed keeps the
watermark as cautious as the ISR the controller still has (KIP-497). It does not move
while the committed ISR is smaller than min.insync.replicas.

A follower is caught up at a fetch whose offset reached the leader's log end as it was at
that fetch, or at the previous fetch when this one reached the end the leader had then
(it was caught up then, as far as it could know). An ISR member not caught up for
replica.lag.time.max.ms is lagging; a replica outside the ISR whose log end has reached
the high watermark and the start of the current leader epoch may join.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class FollowerProgress:
    broker_id: int
    log_end_offset: int = -1
    """Every offset below this one is on the follower (-1: not heard from as leader)."""
    last_caught_up_ms: int = -1
    last_fetch_ms: int = -1
    last_fetch_leader_end: int = -1
    log_start_offset: int = -1
    """Where the follower's log starts, as its last fetch said (-1: not said)."""


class LeaderState:
    """One led partition's replicas, ISR and in-flight ISR change."""

    __slots__ = (
        "_followers",
        "epoch_start_offset",
        "isr",
        "leader_epoch",
        "node_id",
        "partition_epoch",
        "pending_isr",
        "replicas",
    )

    def __init__(
        self,
        *,
        node_id: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        leader_epoch: int,
        partition_epoch: int,
        epoch_start_offset: int,
        now_ms: int,
    ) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.isr = isr
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.epoch_start_offset = epoch_start_offset
        self.pending_isr: tuple[int, ...] | None = None
        self._followers: dict[int, FollowerProgress] = {}
        self.update(replicas=replicas, isr=isr, partition_epoch=partition_epoch, now_ms=now_ms)

    # --- what the metadata says ---------------------------------------------------------

    def update(
        self, *, replicas: tuple[int, ...], isr: tuple[int, ...], partition_epoch: int, now_ms: int
    ) -> None:
        """The committed replicas and ISR (from the metadata or an AlterPartition answer).

        A member new to the ISR counts as caught up now, so it gets a full
        replica.lag.time.max.ms before it can be found lagging (a new leader must not
        drop followers it has not heard from yet)."""
        if partition_epoch < self.partition_epoch:
            return
        if partition_epoch > self.partition_epoch:
            # Whatever was in flight was decided (or overtaken): the metadata rules.
            self.pending_isr = None
        old = self._followers
        self._followers = {}
        for broker_id in replicas:
            if broker_id == self.node_id:
                continue
            progress = old.get(broker_id) or FollowerProgress(broker_id)
            if broker_id in self.isr and broker_id not in isr:
                # It left (lagging, or fenced: maybe restarted with less): only a new
                # fetch says what it holds now.
                progress = FollowerProgress(broker_id)
            elif broker_id in isr and broker_id not in self.isr:
                progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
            elif broker_id in isr and progress.last_caught_up_ms < 0:
                progress.last_caught_up_ms = now_ms
            self._followers[broker_id] = progress
        self.replicas = replicas
        self.isr = isr
        self.partition_epoch = partition_epoch

    def follower(self, broker_id: int) -> FollowerProgress | None:
        return self._followers.get(broker_id)

    # --- fetches -------------------------------------------------------------------------

    def on_fetch(
        self,
        broker_id: int,
        fetch_offset: int,
        leader_end: int,
        now_ms: int,
        follower_start: int = -1,
    ) -> bool:
        """A fetch from `broker_id` at `fetch_offset` while the leader's log ended at
        `leader_end`; the follower's log starts at `follower_start` (-1: it did not say).
        False (nothing recorded) when it is not a follower of ours."""
        progress = self._followers.get(broker_id)
        if progress is None:
            return False
        progress.log_start_offset = follower_start
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_end >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_end = leader_end
        progress.last_fetch_ms = now_ms
        return True

    def low_watermark(self, own_start: int) -> int:
        """The smallest log start among the leader (`own_start`) and the followers in the
        committed ISR: records below it are gone from every replica that may lead next
        (DeleteRecords' answer). -1 while an ISR member has not said where it starts."""
        starts = [own_start]
        for broker_id in self.isr:
            progress = self._followers.get(broker_id)
            if progress is not None:
                starts.append(progress.log_start_offset)
        return min(starts)

    # --- the high watermark ---------------------------------------------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(dict.fromkeys((*self.isr, *self.pending_isr)))

    def high_watermark(self, own_end: int, min_isr: int) -> int | None:
        """The offset every member of the maximal ISR has reached, counting the leader at
        `own_end`; None while the committed ISR is below `min_isr` (it must not move)."""
        if len(self.isr) < min_isr:
            return None
        watermark = own_end
        for broker_id in self.maximal_isr:
            if broker_id == self.node_id:
                continue
            progress = self._followers.get(broker_id)
            if progress is None or progress.log_end_offset < 0:
                return None
            watermark = min(watermark, progress.log_end_offset)
        return watermark

    # --- ISR changes ------------------------------------------------------------------------

    def lagging(self, now_ms: int, lag_ms: int) -> list[int]:
        """ISR members (not the leader) not caught up for more than `lag_ms`."""
        return [
            broker_id
            for broker_id in self.isr
            if broker_id != self.node_id
            and (progress := self._followers.get(broker_id)) is not None
            and now_ms - progress.last_caught_up_ms > lag_ms
        ]

    def caught_up(self, high_watermark: int, ineligible: frozenset[int] = frozenset()) -> list[int]:
        """Replicas outside the maximal ISR that may join it now. A fenced or shutting
        down broker (`ineligible`) may not, however far it is (KIP-841): the controller
        would refuse the whole change, keeping out the eligible ones with it."""
        members = set(self.maximal_isr)
        return [
            progress.broker_id
            for progress in self._followers.values()
            if progress.broker_id not in members
            and progress.broker_id not in ineligible
            and progress.log_end_offset >= 0
            and progress.log_end_offset >= high_watermark
            and progress.log_end_offset >= self.epoch_start_offset
        ]

    def next_isr(
        self,
        now_ms: int,
        lag_ms: int,
        high_watermark: int,
        *,
        ineligible: frozenset[int] = frozenset(),
    ) -> tuple[int, ...] | None:
        """The ISR to propose now, or None: nothing to change, or a change is in flight.
        Lagging members leave first; only when none lags do caught-up, eligible replicas
        join."""
        if self.pending_isr is not None:
            return None
        lagging = set(self.lagging(now_ms, lag_ms))
        if lagging:
            return tuple(b for b in self.isr if b not in lagging)
        joining = set(self.caught_up(high_watermark, ineligible))
        if joining:
            return tuple(b for b in self.replicas if b in self.isr or b in joining)
        return None

    def propose(self, isr: tuple[int, ...]) -> None:
        self.pending_isr = isr

    def refused(self) -> None:
        """The controller refused the change (or it was lost): propose again later."""
        self.pending_isr = None
