"""Replica placement for new partitions: rack-aware, leaders spread evenly.

Written by hand after Kafka's rack-aware assignment (AdminUtils): the brokers are put in a
rack-alternated order (the first broker of each rack, then the second of each, ...);
partition p's leader is the broker at (start + p) in that order, so leaders go round-robin
over every broker; its followers are taken from a shifted walk of the same order, skipping
a broker on a rack that already holds a replica of the partition until every rack does.
So when there are at least as many racks as replicas, each partition's replicas sit on
distinct racks. Brokers without a rack count as one rack of their own ("no rack"); when no
broker has a rack this is the plain round-robin placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from random import Random

from kio.schema.errors import ErrorCode

from strom.metadata.refused import Refused


def place_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    rng: Random,
    *,
    first_partition: int = 0,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, tuple[int, ...]]:
    """Replicas of partitions first_partition.. on `brokers` (the live ones); the first
    replica of each is its preferred leader. `racks` gives each broker's rack, if any."""
    if replication_factor > len(brokers):
        raise Refused(
            ErrorCode.invalid_replication_factor,
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} available broker(s)",
        )
    rack_of = {broker: (racks or {}).get(broker) for broker in brokers}
    arranged = _rack_alternated(rack_of)
    count = len(arranged)
    rack_count = len(set(rack_of.values()))
    start = rng.randrange(count)
    shift = rng.randrange(count)
    placement: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + num_partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        leader_index = (start + partition) % count
        chosen = [arranged[leader_index]]
        racks_used = {rack_of[chosen[0]]}
        step = 0
        while len(chosen) < replication_factor:
            # One walk over the other brokers takes a broker from every rack not yet used;
            # a second one fills up from the used racks. So this ends within 2 walks.
            assert step < 2 * count, "placement walked every broker twice"
            candidate = arranged[(leader_index + 1 + (shift + step) % (count - 1)) % count]
            step += 1
            if candidate in chosen:
                continue
            if rack_of[candidate] in racks_used and len(racks_used) < rack_count:
                continue
            chosen.append(candidate)
            racks_used.add(rack_of[candidate])
        placement[partition] = tuple(chosen)
    return placement


def _rack_alternated(rack_of: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered rack by rack in turn: racks by name, brokers by id within a rack."""
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(rack_of[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack, key=lambda r: (r is None, r or ""))]
    arranged: list[int] = []
    for row in range(max((len(column) for column in columns), default=0)):
        arranged.extend(column[row] for column in columns if row < len(column))
    return arranged


def check_assignments(
    assignments: Mapping[int, Sequence[int]], registered: set[int], first_partition: int
) -> dict[int, tuple[int, ...]]:
    """Explicit replica assignments, honoured as given if they name registered brokers."""
    expected = list(range(first_partition, first_partition + len(assignments)))
    if sorted(assignments) != expected:
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            f"replica assignments must cover partitions {expected[0]}..{expected[-1]} "
            "consecutively",
        )
    sizes = {len(replicas) for replicas in assignments.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            "every partition needs the same, non-zero number of replicas",
        )
    result: dict[int, tuple[int, ...]] = {}
    for partition, replicas in sorted(assignments.items()):
        if len(set(replicas)) != len(replicas):
            raise Refused(
                ErrorCode.invalid_replica_assignment,
                f"partition {partition} lists a broker twice: {list(replicas)}",
            )
        unknown = [b for b in replicas if b not in registered]
        if unknown:
            raise Refused(
                ErrorCode.invalid_replica_assignment,
                f"partition {partition} names unknown broker(s) {unknown}",
            )
        result[partition] = tuple(replicas)
    return result


def initial_state(
    partition: int, replicas: tuple[int, ...], live: set[int]
) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) of a new partition: its live replicas, in replica order, lead."""
    isr = tuple(r for r in replicas if r in live)
    if not isr:
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            f"every replica of partition {partition} ({list(replicas)}) is on a fenced "
            "broker; name at least one live broker",
        )
    return isr[0], isr
