"""The fault harness's history checker on hand-made histories: one test per anomaly it
must find, a clean history, and the outcomes it must allow. No sockets, no sleeps."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/, where the fault package is

from histories import Builder, kinds

from fault import history as history_json
from fault.checker import AnomalyKind, check
from fault.history import History, NodeChange
from fault.recovery import RECOVERY_BOUND_S, Verdict, recoveries

FAULT_DIR = Path(__file__).parents[2] / "fault"


def clean_builder() -> tuple[Builder, dict[int, list[str]]]:
    """Two producers, two partitions, two consumers reading everything, a kill and a
    restart in the middle: nothing wrong."""
    b = Builder()
    final: dict[int, list[str]] = {0: [], 1: []}
    for _ in range(3):
        for producer in ("p0", "p1"):
            for partition in (0, 1):
                final[partition].append(b.write(producer, partition, len(final[partition])))
        if len(final[0]) == 4:
            b.node(2, NodeChange.KILLED)
            b.node(2, NodeChange.RESTARTED)
            b.node(2, NodeChange.READY)
    for consumer in ("c0", "c1"):
        for partition, values in final.items():
            for offset, value in enumerate(values):
                b.read(consumer, partition, offset, value)
    return b, final


def test_a_clean_history_has_no_anomalies_and_counts_everything() -> None:
    b, final = clean_builder()
    result = check(b.history(final))
    assert result.ok, result.summary()
    counts = result.counts
    assert (counts.writes_sent, counts.writes_ok, counts.writes_failed) == (12, 12, 0)
    assert (counts.writes_unknown, counts.reads, counts.final_records) == (0, 24, 12)
    assert "0 anomalies" in result.summary()


def test_a_lost_acknowledged_write_is_found_with_the_faults_around_it() -> None:
    b = Builder()
    kept = b.write("p0", 0, 0)
    lost = b.write("p0", 0, 1)
    b.node(1, NodeChange.KILLED, "#0 kill leader of partition 0 (node 1) for 3 s")
    b.node(1, NodeChange.RESTARTED, "#0 kill leader of partition 0 (node 1) for 3 s")
    other = b.write("p1", 0, 1)  # the new leader hands out offset 1 again
    result = check(b.history({0: [kept, other]}))

    assert kinds(result) == [AnomalyKind.LOST_WRITE]
    anomaly = result.anomalies[0]
    assert (anomaly.partition, anomaly.offset, anomaly.value) == (0, 1, lost)
    assert "the final log has 'p1-0' there" in anomaly.detail
    assert "nowhere" in anomaly.detail
    assert any("node 1 killed (#0 kill leader of partition 0" in f for f in anomaly.faults)
    assert "lost acknowledged write (1)" in result.summary()


def test_a_write_acknowledged_at_one_offset_and_found_at_another_is_lost_there() -> None:
    b = Builder()
    first = b.write("p0", 0, 0)
    moved = b.write("p0", 0, 1)
    result = check(b.history({0: [first, "p9-0", moved]}))
    lost = result.of_kind(AnomalyKind.LOST_WRITE)
    assert [a.value for a in lost] == [moved]
    assert "the value is at p0@2" in lost[0].detail


def test_a_write_beyond_the_end_of_the_final_log_is_lost() -> None:
    b = Builder()
    first = b.write("p0", 1, 0)
    b.write("p0", 1, 1)
    result = check(b.history({0: [], 1: [first]}))
    assert kinds(result) == [AnomalyKind.LOST_WRITE]
    assert "ends before it (at 1)" in result.anomalies[0].detail


def test_an_implicit_ack_is_looked_up_by_value_in_its_partition() -> None:
    b = Builder()
    first = b.send("p0", 0)
    second = b.send("p0", 0)
    b.ack(first, 0, None)  # librdkafka acknowledged it without an offset
    b.ack(second, 0, 1)
    assert check(b.history({0: [first, second]})).ok


def test_an_implicit_ack_missing_from_its_partition_is_lost() -> None:
    b = Builder()
    value = b.send("p0", 0)
    b.ack(value, 0, None)
    result = check(b.history({0: [], 1: [value]}))
    assert kinds(result) == [AnomalyKind.LOST_WRITE, AnomalyKind.PHANTOM]
    assert "without an offset" in result.anomalies[0].detail


def test_an_implicit_ack_found_out_of_order_is_a_reorder() -> None:
    b = Builder()
    early = b.send("p0", 0)
    late = b.send("p0", 0)
    b.ack(late, 0, 0)
    b.ack(early, 0, None)
    assert kinds(check(b.history({0: [late, early]}))) == [AnomalyKind.PRODUCER_REORDER]


def test_a_read_record_that_the_final_log_lost_is_found() -> None:
    b = Builder()
    value = b.send("p0", 0)  # never acknowledged: the write itself may fail ...
    b.read("c0", 0, 0, value)  # ... but a consumer saw it at offset 0
    b.fail(value, 0)
    result = check(b.history({0: []}))
    assert kinds(result) == [AnomalyKind.LOST_READ]
    assert result.anomalies[0].detail.startswith("c0 read it;")
    assert result.counts.writes_failed == 1


def test_a_duplicate_in_the_final_log_is_found() -> None:
    b = Builder()
    first = b.write("p0", 0, 0)
    second = b.send("p0", 0)  # retried after a lost answer, stored twice
    b.ack(second, 0, 2)
    result = check(b.history({0: [first, second, second]}))
    assert kinds(result) == [AnomalyKind.DUPLICATE]
    assert "2 times in the final log: p0@1, p0@2" in result.anomalies[0].detail


def test_a_consumer_reading_backwards_is_found_once_per_step_back() -> None:
    b = Builder()
    values = [b.write("p0", 0, offset) for offset in range(3)]
    for offset in (0, 1, 2, 0, 1, 2):  # rewound to the start after offset 2
        b.read("c0", 0, offset, values[offset])
    b.read("c1", 0, 0, values[0])  # another consumer's reads are its own
    result = check(b.history({0: values}))
    assert kinds(result) == [AnomalyKind.BACKWARDS_READ]
    anomaly = result.anomalies[0]
    assert anomaly.offset == 0
    assert "c0 read offset 0 after offset 2" in anomaly.detail


def test_a_repeated_read_of_one_offset_is_backwards() -> None:
    b = Builder()
    value = b.write("p0", 0, 0)
    b.read("c0", 0, 0, value)
    b.read("c0", 0, 0, value)
    assert kinds(check(b.history({0: [value]}))) == [AnomalyKind.BACKWARDS_READ]


def test_a_producer_whose_writes_were_reordered_is_found() -> None:
    b = Builder()
    early = b.send("p0", 0)
    late = b.send("p0", 0)
    b.ack(late, 0, 0)
    b.ack(early, 0, 1)
    result = check(b.history({0: [late, early]}))
    assert kinds(result) == [AnomalyKind.PRODUCER_REORDER]
    assert "write #1 got offset 0, not after its write #0" in result.anomalies[0].detail


def test_writes_of_different_producers_or_partitions_may_interleave() -> None:
    b = Builder()
    a0 = b.send("p0", 0)
    b0 = b.send("p1", 0)
    a1 = b.send("p0", 1)
    b.ack(b0, 0, 0)
    b.ack(a0, 0, 1)
    b.ack(a1, 1, 0)
    assert check(b.history({0: [b0, a0], 1: [a1]})).ok


def test_an_ack_while_too_few_replicas_were_up_is_found() -> None:
    b = Builder()
    b.node(2, NodeChange.KILLED)
    b.node(3, NodeChange.KILLED)
    value = b.write("p0", 0, 0)  # sent and acknowledged with only node 1 up
    b.node(2, NodeChange.RESTARTED)
    b.node(3, NodeChange.RESTARTED)
    result = check(b.history({0: [value]}))
    assert kinds(result) == [AnomalyKind.UNDER_MIN_ISR_ACK]
    assert "only nodes [1] of the replicas [1, 2, 3] were up" in result.anomalies[0].detail


def test_an_ack_that_waited_for_a_replica_to_come_back_is_allowed() -> None:
    b = Builder()
    b.node(2, NodeChange.KILLED)
    b.node(3, NodeChange.PAUSED)
    value = b.send("p0", 0)
    b.node(3, NodeChange.RESUMED)
    b.ack(value, 0, 0)
    assert check(b.history({0: [value]})).ok


def test_a_record_no_producer_sent_is_a_phantom() -> None:
    b = Builder()
    value = b.write("p0", 0, 0)
    b.read("c0", 0, 1, "garbage")
    result = check(b.history({0: [value, "garbage"], 1: [value]}))
    phantoms = result.of_kind(AnomalyKind.PHANTOM)
    assert [(a.partition, a.offset, a.value) for a in phantoms] == [
        (0, 1, "garbage"),
        (1, 0, value),
    ]
    assert "no producer sent it" in phantoms[0].detail
    assert "it was sent to p0" in phantoms[1].detail


def test_failed_and_unknown_writes_may_be_present_or_absent() -> None:
    b = Builder()
    failed_present = b.send("p0", 0)
    failed_absent = b.send("p0", 0)
    unknown_present = b.send("p0", 0)
    b.send("p0", 0)  # unknown and absent
    b.fail(failed_present, 0)
    b.fail(failed_absent, 0)
    b.read("c0", 0, 0, failed_present)
    result = check(b.history({0: [failed_present, unknown_present]}))
    assert result.ok, result.summary()
    counts = result.counts
    assert (counts.writes_failed, counts.failed_but_present) == (2, 1)
    assert (counts.writes_unknown, counts.unknown_but_present) == (2, 1)
    assert counts.writes_ok == 0


def test_the_summary_lists_a_few_of_each_kind_and_counts_the_rest() -> None:
    b = Builder()
    for offset in range(8):
        b.write("p0", 0, offset)
    summary = check(b.history({0: []})).summary(per_kind=3)
    assert summary.startswith("8 anomalies (lost acknowledged write: 8)")
    assert "... and 5 more" in summary


def test_a_history_survives_json() -> None:
    b, final = clean_builder()
    b.read("c0", 1, 0, final[1][0])  # a backwards read, so there is something to find
    history = b.history(final)
    again = history_json.from_json(history_json.to_json(history))
    assert again == history
    assert kinds(check(again)) == kinds(check(history)) == [AnomalyKind.BACKWARDS_READ]


def test_the_checker_and_the_history_do_no_io() -> None:
    allowed = {
        "__future__",
        "bisect",
        "collections",
        "dataclasses",
        "enum",
        "itertools",
        "math",
        "typing",
    }
    # topology.py takes a seeded Random for its random topologies (never the global one)
    modules = {"checker.py": allowed, "history.py": allowed, "recovery.py": allowed}
    modules["topology.py"] = allowed | {"random"}
    for module, allowed in modules.items():
        tree = ast.parse((FAULT_DIR / module).read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        }
        assert imported <= allowed, f"{module} imports {sorted(imported - allowed)}"


# --- recovery after a heal of the network ------------------------------------------------


class Writes:
    """Writes to both partitions of SETUP, each acknowledged right away, with the final
    log kept alongside."""

    def __init__(self, b: Builder) -> None:
        self.b = b
        self.final: dict[int, list[str]] = {0: [], 1: []}

    def write(self, partition: int, producer: str = "p0") -> str:
        value = self.b.write(producer, partition, len(self.final[partition]))
        self.final[partition].append(value)
        return value

    def both(self) -> None:
        self.write(0)
        self.write(1)

    def history(self) -> History:
        return self.b.history(self.final)


def cut_and_heal() -> tuple[Builder, Writes, float]:
    """Writes, node 1 cut from 2 and 3, healed; the time of the heal."""
    b = Builder()
    w = Writes(b)
    w.both()
    b.network((1, 2), (1, 3))
    heal_s = b.network(why="end of #0 cut node 1")
    return b, w, heal_s


def test_partitions_that_take_writes_soon_after_a_heal_recover_in_the_measured_time() -> None:
    b, w, heal_s = cut_and_heal()
    b.tick(1.0)
    w.write(1)
    b.tick(2.0)
    w.write(0)
    b.tick(RECOVERY_BOUND_S)
    w.both()
    result = check(w.history())
    assert result.ok, result.summary()
    [recovery] = result.recoveries
    assert recovery.heal_s == heal_s and recovery.why == "end of #0 cut node 1"
    took = {p.partition: (p.verdict, p.took_s) for p in recovery.partitions}
    assert took[0][0] is took[1][0] is Verdict.RECOVERED
    assert took[1][1] == pytest.approx(1.2) and took[0][1] == pytest.approx(3.4)
    assert recovery.slowest_s == pytest.approx(3.4)
    assert "p0 3.40s, p1 1.20s" in result.recovery_report()


def test_a_partition_that_takes_no_write_within_the_bound_after_a_heal_is_an_anomaly() -> None:
    b, w, heal_s = cut_and_heal()
    for _ in range(20):  # partition 1 takes writes all along; partition 0 none
        b.tick(1.0)
        w.write(1)
    b.send("p1", 0)  # sent, never acknowledged
    result = check(w.history())
    assert kinds(result) == [AnomalyKind.NO_WRITE_AFTER_HEAL]
    anomaly = result.anomalies[0]
    assert (anomaly.partition, anomaly.at_s) == (0, heal_s)
    assert "within 15 s" in anomaly.detail and "none was acknowledged" in anomaly.detail
    assert any("network cut 1-2 1-3 (#0 cut node 1)" in f for f in anomaly.faults)
    assert any("network whole (end of #0 cut node 1)" in f for f in anomaly.faults)
    verdicts = {p.partition: p.verdict for p in result.recoveries[0].partitions}
    assert verdicts == {0: Verdict.NOT_RECOVERED, 1: Verdict.RECOVERED}


def test_a_partition_that_recovers_and_then_fails_writes_has_stalled() -> None:
    b, w, heal_s = cut_and_heal()
    b.tick(0.5)
    w.both()  # both recover at once ...
    stuck = b.send("p1", 0)  # ... then a write to partition 0 times out after 20 s
    for _ in range(20):
        b.tick(1.0)
        w.write(1)
    b.fail(stuck, 0)
    for _ in range(20):
        b.tick(1.0)
        w.both()
    result = check(w.history())
    assert kinds(result) == [AnomalyKind.NO_WRITE_AFTER_HEAL]
    anomaly = result.anomalies[0]
    assert (anomaly.partition, anomaly.at_s) == (0, heal_s)
    assert "it took a write 0.70 s after the heal, then stalled" in anomaly.detail
    assert f"{stuck!r}, sent 1.00 s after the heal, failed after 24.10 s" in anomaly.detail
    p0, p1 = result.recoveries[0].partitions
    assert (p0.verdict, p1.verdict) == (Verdict.STALLED, Verdict.RECOVERED)
    assert "p0 0.70s, then stalled after recovering" in result.recovery_report()


def test_a_write_acknowledged_only_after_the_bound_is_a_stall_one_never_answered_not() -> None:
    b, w, _ = cut_and_heal()
    b.tick(0.5)
    w.both()
    slow = b.send("p1", 0)
    b.send("p2", 0)  # never answered (its producer was replaced): not counted
    b.tick(RECOVERY_BOUND_S + 1)
    b.ack(slow, 0, 1)
    w.final[0].append(slow)
    b.tick(RECOVERY_BOUND_S)
    w.both()
    [recovery] = check(w.history()).recoveries
    p0 = recovery.partitions[0]
    assert p0.verdict is Verdict.STALLED
    assert "was acknowledged only 16.20 s later" in p0.detail


def test_a_write_sent_before_the_heal_does_not_show_recovery() -> None:
    b = Builder()
    w = Writes(b)
    b.network((1, 2), (1, 3))
    stuck = b.send("p0", 0)  # sent during the cut ...
    b.network()
    b.tick(1.0)
    b.ack(stuck, 0, 0)  # ... acknowledged after the heal
    w.final[0].append(stuck)
    for _ in range(20):
        b.tick(1.0)
        w.write(1)
    assert kinds(check(w.history())) == [AnomalyKind.NO_WRITE_AFTER_HEAL]


def test_the_next_fault_before_the_bound_leaves_a_heal_unmeasured() -> None:
    b, w, _ = cut_and_heal()
    b.tick(3.0)
    b.network((2, 3))  # a flapping network: the next topology 3 s after the heal
    for _ in range(20):
        b.tick(1.0)
        w.write(1)
    b.network()
    b.tick(0.5)
    w.both()
    result = check(w.history())
    assert result.ok, result.summary()
    first, second = result.recoveries
    assert {p.verdict for p in first.partitions} == {Verdict.INTERRUPTED}
    assert "the next fault came 3.10 s after the heal" in first.partitions[0].detail
    assert {p.verdict for p in second.partitions} == {Verdict.RECOVERED}


def test_the_end_of_the_run_before_the_bound_leaves_a_heal_unmeasured() -> None:
    b, w, _ = cut_and_heal()
    b.tick(2.0)
    w.write(1)
    result = check(w.history())
    assert result.ok, result.summary()
    verdicts = {p.partition: p.verdict for p in result.recoveries[0].partitions}
    assert verdicts == {0: Verdict.INTERRUPTED, 1: Verdict.RECOVERED}
    assert "the run ended 2.20 s after the heal" in result.recoveries[0].partitions[0].detail


def test_a_heal_after_the_last_write_was_sent_is_unmeasured() -> None:
    b, w, _ = cut_and_heal()
    w.final[0].append(b.send("p0", 0))
    b.network((1, 2))
    b.tick(1.0)
    b.network()
    b.tick(30.0)
    b.ack(w.final[0][-1], 0, 1)
    [_, late] = check(w.history()).recoveries
    assert {p.verdict for p in late.partitions} == {Verdict.INTERRUPTED}
    assert late.partitions[0].detail.startswith("no write was sent after the heal")


def test_a_partition_with_too_few_live_replicas_need_not_take_writes() -> None:
    b = Builder()
    w = Writes(b)
    b.node(2, NodeChange.KILLED)
    b.node(3, NodeChange.KILLED)
    b.network((1, 2), (1, 3))
    b.network()
    for _ in range(20):
        b.tick(1.0)
        b.send("p0", 0)
    result = check(w.history())
    assert result.ok, result.summary()
    assert {p.verdict for p in result.recoveries[0].partitions} == {Verdict.TOO_FEW_REPLICAS}


def test_the_bound_runs_from_when_enough_replicas_are_ready_again() -> None:
    b = Builder()
    w = Writes(b)
    b.network((1, 2), (1, 3))
    b.node(2, NodeChange.KILLED)
    b.node(3, NodeChange.KILLED)
    b.node(2, NodeChange.RESTARTED)
    heal_s = b.network()
    b.tick(10.0)
    b.node(2, NodeChange.READY)  # two of three replicas live from here on
    b.tick(12.0)
    w.write(0)  # 22 s after the heal, 12 s after node 2 was ready
    b.tick(20.0)
    w.write(0)
    history = w.history()
    [recovery] = recoveries(history)
    p0 = recovery.partitions[0]
    assert (p0.verdict, p0.took_s) == (Verdict.RECOVERED, pytest.approx(22.3))
    assert recovery.heal_s == heal_s
    [late] = recoveries(history, bound_s=5.0)[0].partitions[:1]
    assert late.verdict is Verdict.NOT_RECOVERED
    assert "(10.10 s after it)" in late.detail and "acknowledged 22.30 s after" in late.detail


def test_a_history_without_network_changes_has_no_recoveries() -> None:
    b, final = clean_builder()
    result = check(b.history(final))
    assert result.recoveries == () and result.recovery_report() == "no heals of the network"


def test_a_history_with_network_changes_survives_json() -> None:
    b, w, _ = cut_and_heal()
    b.tick(1.0)
    w.both()
    history = w.history()
    again = history_json.from_json(history_json.to_json(history))
    assert again == history
    assert recoveries(again) == recoveries(history)
