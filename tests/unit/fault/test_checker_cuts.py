"""The checker's acks=all rule across cuts of the network: a write may be acknowledged
only if one replica could have passed it to enough others (min.insync.replicas, itself
included) between its send and its acknowledgement. No sockets, no sleeps."""

from __future__ import annotations

from histories import Builder, kinds  # first: it puts tests/ on sys.path for `fault`

from fault.checker import HEAL_SLACK_S, AnomalyKind, check
from fault.history import NodeChange

# SETUP: partition 0 on replicas (1, 2, 3), min.insync.replicas=2


def test_an_ack_from_a_replica_cut_from_every_other_is_found() -> None:
    b = Builder()
    b.network((1, 2), (1, 3), (2, 3))  # nobody reaches anybody
    value = b.write("p0", 0, 0)
    b.tick(1.0)
    b.network(why="end of #0")
    result = check(b.history({0: [value]}))
    assert kinds(result) == [AnomalyKind.UNDER_MIN_ISR_ACK]
    detail = result.anomalies[0].detail
    assert "no replica of [1, 2, 3] could reach more than nodes [1]" in detail
    assert "across the network's cuts" in detail


def test_an_ack_while_the_only_other_live_replica_was_cut_off_is_found() -> None:
    b = Builder()
    b.node(3, NodeChange.KILLED)
    b.network((1, 2))  # 1 and 2 are up but cannot reach each other; 3 is down
    value = b.write("p0", 0, 0)
    b.tick(1.0)
    b.network(why="end of #0")
    b.node(3, NodeChange.RESTARTED)
    assert kinds(check(b.history({0: [value]}))) == [AnomalyKind.UNDER_MIN_ISR_ACK]


def test_a_leader_that_still_reaches_one_follower_may_acknowledge() -> None:
    b = Builder()
    b.network((1, 2))  # 1 reaches 3, so does 2: either could lead with an ISR of two
    value = b.write("p0", 0, 0)
    b.tick(1.0)
    b.network(why="end of #0")
    assert check(b.history({0: [value]})).ok


def test_an_ack_that_waited_for_the_heal_is_allowed() -> None:
    b = Builder()
    b.network((1, 2), (1, 3), (2, 3))
    value = b.send("p0", 0)
    b.network(why="end of #0")
    b.ack(value, 0, 0)
    assert check(b.history({0: [value]})).ok


def test_a_record_replicated_before_the_cut_may_be_acknowledged_during_it() -> None:
    b = Builder()
    value = b.send("p0", 0)  # the followers fetch it now
    b.tick(1.0)
    b.network((1, 2), (1, 3), (2, 3))
    b.ack(value, 0, 0)  # the answer reaches the client only now
    b.tick(1.0)
    b.network(why="end of #0")
    assert check(b.history({0: [value]})).ok


def test_a_heal_is_taken_to_start_a_moment_before_its_stamp() -> None:
    """The links carry fetches once the rules are gone, a little before the heal is
    stamped: an ack just before the stamp is allowed, one well before it is not."""
    for before_s, allowed in ((HEAL_SLACK_S / 2, True), (HEAL_SLACK_S * 4, False)):
        b = Builder()
        b.network((1, 2), (1, 3), (2, 3))
        b.tick(5.0)
        value = b.send("p0", 0)
        b.tick(1.0)
        b.ack(value, 0, 0)
        b.tick(before_s)
        b.network(why="end of #0")
        assert check(b.history({0: [value]})).ok is allowed, before_s


def test_a_follower_down_while_the_network_allowed_it_cannot_count() -> None:
    b = Builder()
    b.network((1, 3), (2, 3))  # 3 cut from both; 1 and 2 connected
    b.node(2, NodeChange.KILLED)  # and 2 is down for the whole write
    value = b.write("p0", 0, 0)
    b.node(2, NodeChange.RESTARTED)
    b.tick(1.0)
    b.network(why="end of #0")
    result = check(b.history({0: [value]}))
    assert kinds(result) == [AnomalyKind.UNDER_MIN_ISR_ACK]
