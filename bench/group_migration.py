"""Consumer groups moving between the classic protocol and the consumer protocol of KIP-848
while their members roll over (docs/groups.md, "Moving a group between the protocols").

    .venv/bin/python bench/group_migration.py [--bootstrap HOST:PORT] [--members 10]
        [--partitions 20] [--heartbeat-ms 1000] [--quiet-ms 2000] [--rounds 3]
        [--rolling-rounds 3] [--strategies range,cooperative-sticky] [--cases events,rolling]
        [--broker-log FILE] [--json FILE]

A classic group of `--members` confluent-kafka consumers (each in its own thread, as in
bench/groups.py) shares a topic of `--partitions` partitions while a producer writes to
every partition about every 5 ms. A step ends when every member "consumes again" as
bench/groups.py defines it (`all_consuming`: together the members own every partition
once, evenly, and each has received a record after its last assignment change and after
the step began) and stays so, no member's assignment changing, for `--quiet-ms` more:
a member that learns of a rebalance only at its next heartbeat would otherwise be
counted as consuming before it stops. The step's figure ends where that last consuming
stretch began; the quiet time is waited out and never counted. For each classic
assignor in `--strategies`:

- events: in the settled classic group, one member is closed and a member with
  group.protocol=consumer subscribes in its place (the upgrade: the group becomes a
  consumer group); the figure runs from that subscribe. Then, in the same group (N - 1
  classic members, 1 consumer-protocol member), the consumer-protocol member leaves
  with close() (the downgrade: the group becomes classic again); the figure runs from
  the start of close(). `--rounds` groups per assignor, the assignors taking turns.
- rolling: every member of a settled classic group is replaced in turn, each one closed
  and then a new member subscribed, the next one once the step ends; "classic" replaces
  them with classic members of the same assignor, "upgrade" with consumer-protocol
  members. The figures are the sum of the steps (first close() to the last step's end,
  without the quiet waits) and the longest time any partition went without a record
  reaching any member (from the last record before the first close() until every
  partition has been received after the last step; the quiet waits are inside this
  window). Classic and upgrade alternate, classic first, `--rolling-rounds` times.

Members heartbeat every `--heartbeat-ms` (the classic ones by their own
heartbeat.interval.ms, with session.timeout.ms 10000; the consumer-protocol ones by the
broker's group.consumer.heartbeat.interval.ms, which the strom started here is given).
Without --bootstrap the script starts strom itself as bench/groups.py does (fsync before
every acknowledgement, group.initial.rebalance.delay.ms at its default of 3000, which
only delays forming each fresh group, before anything is timed); `--broker-log` keeps
its log (INFO). Every group and topic is fresh, on the same broker.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from groups import (
    CONSUMER_PROTOCOL,
    MemberState,
    all_consuming,
    heartbeat_settings,
    keep_producing,
    new_member,
    run_member,
    wait,
)
from produce_consume import Broker, create_topic, log, start_strom, stop

STEP_TIMEOUT_S = 60.0


class PartitionGaps:
    """The longest time any partition went without a record reaching a member, while a
    window is open; fed by every member's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, float] = {}
        self._open = False
        self.longest_s = 0.0

    def record(self, partition: int) -> None:
        now = time.perf_counter()
        with self._lock:
            last = self._last.get(partition)
            if self._open and last is not None:
                self.longest_s = max(self.longest_s, now - last)
            self._last[partition] = now

    def open(self) -> None:
        with self._lock:
            self._open = True
            self.longest_s = 0.0

    def close(self) -> float:
        with self._lock:
            self._open = False
            return self.longest_s

    def all_seen_since(self, since: float, partitions: int) -> bool:
        with self._lock:
            return all(self._last.get(p, 0.0) > since for p in range(partitions))


class LiveGroup:
    """A fresh topic with a producer writing to every partition, and one group's members
    consuming it, each in its own thread."""

    def __init__(self, bootstrap: str, partitions: int, heartbeat_ms: int, quiet_ms: int) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.heartbeat_ms = heartbeat_ms
        self.quiet_s = quiet_ms / 1000
        self.topic = f"migration-{uuid.uuid4().hex[:6]}"
        self.group = f"migration-bench-{uuid.uuid4().hex[:6]}"
        self.gaps = PartitionGaps()
        self.members: list[tuple[str, MemberState, threading.Thread]] = []
        self.backlog: dict[str, int] = {}
        self.late_changes = 0
        """Times an assignment changed after all consumed (the quiet time caught it)."""
        create_topic(bootstrap, self.topic, partitions, 1)
        self._producing = threading.Event()
        self._producing.set()
        self._producer = threading.Thread(
            target=keep_producing,
            args=(bootstrap, self.topic, partitions, self._producing, self.backlog),
        )
        self._producer.start()

    def add(self, strategy: str) -> float:
        """Start a member (`strategy` is a classic assignor or CONSUMER_PROTOCOL); returns
        the time just before its subscribe."""
        state = new_member(self.bootstrap, self.topic, self.group, strategy, self.heartbeat_ms)
        state.on_record = self.gaps.record
        incremental = strategy in ("cooperative-sticky", CONSUMER_PROTOCOL)
        thread = threading.Thread(target=run_member, args=(state, self.topic, incremental))
        self.members.append((strategy, state, thread))
        subscribed_at = time.perf_counter()
        thread.start()
        return subscribed_at

    def remove(self, index: int) -> float:
        """Close member `index` (until its close() returns); returns the seconds it took."""
        _, state, thread = self.members.pop(index)
        began = time.perf_counter()
        state.stop.set()
        thread.join(STEP_TIMEOUT_S)
        if thread.is_alive():
            raise SystemExit(f"a member's close() took over {STEP_TIMEOUT_S:g} s")
        return time.perf_counter() - began

    def states(self) -> list[MemberState]:
        return [state for _, state, _ in self.members]

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        """`groups.wait`, and what each member was doing when it timed out."""
        try:
            wait(condition, timeout_s, what)
        except SystemExit:
            now = time.perf_counter()
            for strategy, state, _ in self.members:
                log(
                    f"  {strategy}: owns {sorted(state.owned)}, assigned "
                    f"{now - state.assigned_at:.1f} s ago, last record "
                    f"{now - state.last_record_at:.1f} s ago"
                )
            log(f"  producer: {self.backlog}; group {self.group}")
            raise

    def consuming(self, since: float) -> bool:
        return all_consuming(self.states(), self.partitions, since)

    def wait_stable(self, since: float, what: str) -> float:
        """Wait until every member consumes again after `since` and no assignment changes
        for the quiet time after; returns when that last consuming stretch began."""
        deadline = time.perf_counter() + STEP_TIMEOUT_S
        while True:
            self.wait(lambda: self.consuming(since), deadline - time.perf_counter(), what)
            consuming_at = time.perf_counter()
            changes = [s.assigned_at for s in self.states()]
            while time.perf_counter() < consuming_at + self.quiet_s:
                if [s.assigned_at for s in self.states()] != changes:
                    self.late_changes += 1
                    break
                time.sleep(0.01)
            else:
                return consuming_at

    def revocations(self) -> int:
        return sum(s.revocations for s in self.states())

    def settle(self) -> None:
        """Wait until the group is stable and every partition has been received since."""
        self.close_gaps(self.wait_stable(0.0, "the group to settle"))

    def step(self, began: float, what: str) -> tuple[float, float]:
        """Wait for the step that began at `began` to end; returns its seconds and the
        longest partition gap since the gaps' window opened."""
        done = self.wait_stable(began, what)
        return done - began, self.close_gaps(done)

    def close_gaps(self, since: float) -> float:
        """Close the gaps' window once every partition has been received after `since`;
        returns the longest gap."""
        self.wait(
            lambda: self.gaps.all_seen_since(since, self.partitions),
            STEP_TIMEOUT_S,
            "every partition to be consumed",
        )
        return self.gaps.close()

    def end(self) -> None:
        self._producing.clear()
        for state in self.states():
            state.stop.set()
        for _, _, thread in self.members:
            thread.join(30)
        self._producer.join(30)


def bench_events(members: int, strategy: str, live: LiveGroup) -> list[dict[str, Any]]:
    for _ in range(members):
        live.add(strategy)
    live.settle()
    live.gaps.open()
    revocations = live.revocations()
    close_s = live.remove(0)
    subscribed_at = live.add(CONSUMER_PROTOCOL)
    seconds, gap_s = live.step(subscribed_at, "the upgrade")
    upgrade = {
        "case": "upgrade",
        "close_s": close_s,
        "seconds_until_all_consume": seconds,
        "longest_gap_s": gap_s,
        "revocations": live.revocations() - revocations,
    }
    live.gaps.open()
    revocations = live.revocations()
    began = time.perf_counter()
    close_s = live.remove(len(live.members) - 1)
    seconds, gap_s = live.step(began, "the downgrade")
    downgrade = {
        "case": "downgrade",
        "close_s": close_s,
        "seconds_until_all_consume": seconds,
        "longest_gap_s": gap_s,
        "revocations": live.revocations() - revocations,
    }
    return [upgrade, downgrade]


def bench_rolling(members: int, strategy: str, upgrade: bool, live: LiveGroup) -> dict[str, Any]:
    for _ in range(members):
        live.add(strategy)
    live.settle()
    steps: list[dict[str, float]] = []
    live.gaps.open()
    began = time.perf_counter()
    for step in range(members):
        step_began = time.perf_counter()
        close_s = live.remove(0)
        subscribed_at = live.add(CONSUMER_PROTOCOL if upgrade else strategy)
        done = live.wait_stable(subscribed_at, f"step {step + 1}")
        steps.append(
            {
                "close_s": close_s,
                "subscribe_to_all_s": done - subscribed_at,
                "step_s": done - step_began,
            }
        )
    wall_s = time.perf_counter() - began
    gap_s = live.close_gaps(done)
    return {
        "total_s": sum(s["step_s"] for s in steps),
        "wall_s_with_quiet_waits": wall_s,
        "longest_gap_s": gap_s,
        "steps": steps,
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def print_tables(results: dict[str, Any], members: int) -> None:
    events = results["events"]
    labels = {
        "upgrade": "a classic member restarts with group.protocol=consumer (upgrade)",
        "downgrade": f"the one consumer-protocol member of {members} leaves (downgrade)",
    }
    if events:
        print()
        print(
            "| event | classic assignor | close() s, median | "
            "-> all consuming, s, median (min-max) | longest partition gap s | "
            "revocations, median |"
        )
        print("|---|---|---|---|---|---|")
        for case in ("upgrade", "downgrade"):
            for strategy in dict.fromkeys(r["strategy"] for r in events):
                runs = [r for r in events if r["case"] == case and r["strategy"] == strategy]
                if not runs:
                    continue
                closes = statistics.median(r["close_s"] for r in runs)
                times = [r["seconds_until_all_consume"] for r in runs]
                gaps = [r["longest_gap_s"] for r in runs]
                revoked = statistics.median(r["revocations"] for r in runs)
                print(
                    f"| {labels[case]} | {strategy} | {closes:.2f} | {spread(times)} | "
                    f"{spread(gaps)} | {revoked:g} |"
                )
    rolling = results["rolling"]
    if rolling:
        print()
        print(
            "| assignor | members replaced by | rounds | steps' total s, median (min-max) | "
            "/ classic | longest partition gap s, median (min-max) | / classic | "
            "one step s, median (min-max over all steps) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for strategy in dict.fromkeys(r["strategy"] for r in rolling):
            base: dict[str, float] = {}
            for upgrade in (False, True):
                runs = [r for r in rolling if r["strategy"] == strategy and r["upgrade"] == upgrade]
                totals = [r["total_s"] for r in runs]
                gaps = [r["longest_gap_s"] for r in runs]
                steps = [s["step_s"] for r in runs for s in r["steps"]]
                if not upgrade:
                    base = {"total": statistics.median(totals), "gap": statistics.median(gaps)}
                print(
                    f"| {strategy} | {'consumer protocol' if upgrade else 'classic, same'} | "
                    f"{len(runs)} | {spread(totals)} | "
                    f"{statistics.median(totals) / base['total']:.2f} | {spread(gaps)} | "
                    f"{statistics.median(gaps) / base['gap']:.2f} | {spread(steps)} |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--quiet-ms", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rolling-rounds", type=int, default=3)
    parser.add_argument("--strategies", default="range,cooperative-sticky")
    parser.add_argument("--cases", default="events,rolling")
    parser.add_argument("--broker-log")
    parser.add_argument("--json")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    cases = args.cases.split(",")
    broker = (
        Broker(args.bootstrap)
        if args.bootstrap
        else start_strom("fsync", heartbeat_settings(args.heartbeat_ms), log_level="info")
    )
    results: dict[str, Any] = {"events": [], "rolling": [], "groups": []}
    began = time.perf_counter()

    def in_group(body: Callable[[LiveGroup], Any], labels: dict[str, Any]) -> Any:
        """Run `body` on a fresh LiveGroup; notes on the group go to results["groups"]."""
        live = LiveGroup(broker.bootstrap, args.partitions, args.heartbeat_ms, args.quiet_ms)
        try:
            return body(live)
        finally:
            live.end()
            if live.backlog.get("full"):
                log(f"  the producer's queue was full {live.backlog['full']} times")
            notes = {
                "producer_backlog_max": live.backlog.get("max", 0),
                "producer_queue_full": live.backlog.get("full", 0),
                "late_changes": live.late_changes,
            }
            results["groups"].append(labels | notes)

    try:
        for round_ in range(args.rounds if "events" in cases else 0):
            turn = strategies[round_ % len(strategies) :] + strategies[: round_ % len(strategies)]
            for strategy in turn:
                log(f"events {round_ + 1}: {strategy}, {args.members} members")
                labels = {"case": "events", "strategy": strategy, "round": round_ + 1}
                events = in_group(partial(bench_events, args.members, strategy), labels)
                results["events"] += [labels | event for event in events]
        for round_ in range(args.rolling_rounds if "rolling" in cases else 0):
            for strategy in strategies:
                for upgrade in (False, True):
                    to = "consumer protocol" if upgrade else "classic"
                    log(f"rolling {round_ + 1}: {args.members} {strategy} members to {to}")
                    labels = {
                        "case": "rolling",
                        "strategy": strategy,
                        "upgrade": upgrade,
                        "round": round_ + 1,
                    }
                    rolled = in_group(
                        partial(bench_rolling, args.members, strategy, upgrade), labels
                    )
                    results["rolling"].append(labels | rolled)
    finally:
        if args.broker_log and broker.data_dir is not None:
            shutil.copy(broker.data_dir / "broker.log", args.broker_log)
        stop(broker)
        if args.json:  # what was measured, even when a step timed out
            with open(args.json, "w") as out:
                json.dump(results, out, indent=2)
    log(f"all cases took {time.perf_counter() - began:.0f} s")
    groups = results["groups"]
    if groups:
        log(
            "most records the producer had waiting for acknowledgement: "
            f"{max(g['producer_backlog_max'] for g in groups):,}; its queue full "
            f"{sum(g['producer_queue_full'] for g in groups)} times; assignment changes after "
            f"all consumed, caught by the quiet time: {sum(g['late_changes'] for g in groups)}"
        )
    print_tables(results, args.members)


if __name__ == "__main__":
    main()
