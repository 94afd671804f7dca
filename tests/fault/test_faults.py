"""Partition replication under faults: real nodes killed and paused on a seeded schedule
while idempotent acks=all producers write and consumers read; the history must show no
lost acknowledged write, no lost read, no duplicate, no backwards read, no reordered
write and no write acknowledged below min.insync.replicas (tests/fault/checker.py).

Each runs on both metadata stores, the built-in Raft quorum and ZooKeeper, except the two
longest: test_kill_every on Raft and test_chase_leader on ZooKeeper (STROM_FAULT_ALL_STORES=1
runs them on both). The others still kill nodes on each store.

.venv/bin/pytest tests/fault/test_faults.py                         # all six, ~5 min
.venv/bin/pytest tests/fault -k raft                                # one store
STROM_FAULT_SEED=5 STROM_FAULT_SECONDS=120 .venv/bin/pytest tests/fault -k kill_every
STROM_FAULT_REPLAY=tests/fault/failures/<file>.json .venv/bin/pytest tests/fault -k <name>
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .history import Acked, History, NodeChange, NodeChanged, Note, Sent
from .runner import (
    STORES,
    RunOutcome,
    Scenario,
    failure_message,
    replay_from_env,
    run_and_check,
    save_failure,
    seconds_from_env,
    seed_from_env,
)
from .schedule import Schedule, chase_leader, kill_every, majority_down, pause_leader

pytestmark = pytest.mark.slow
SETTLE_S = 2.0
"""How long after every node is ready again writes may still fail (leaders moving back)."""


def scenario(name: str, schedule: Schedule, store: str) -> Scenario:
    """The test's scenario, or the one STROM_FAULT_REPLAY names (other tests skip)."""
    replayed = replay_from_env()
    if replayed is None:
        return Scenario(name, schedule, store=store)
    if (replayed.name, replayed.store) != (name, store):
        pytest.skip(f"STROM_FAULT_REPLAY replays {replayed.name} on {replayed.store}")
    return replayed


def run(
    scenario: Scenario,
    tmp_path: Path,
    extra_check: Callable[[History], list[str]] | None = None,
) -> RunOutcome:
    """Run and check; on anomalies (or problems `extra_check` finds, or after a network
    fault a replica not back in its ISR at the end) save the run and fail with the
    summary and the replay command."""
    outcome = run_and_check(scenario, tmp_path)
    problems = extra_check(outcome.history) if extra_check is not None else []
    if outcome.isr_not_full is not None:  # checked after network faults only
        problems.append(
            "a replica did not rejoin its ISR after the network healed and every node was "
            f"back: {outcome.isr_not_full}"
        )
    remarks = [
        f"  {e.at_s:.2f}s {e.text}"
        for e in outcome.history.events
        if isinstance(e, Note) and e.source == "faults"
    ]
    recoveries = [outcome.result.recovery_report()] if outcome.result.recoveries else []
    print(
        f"\n{scenario.name} (seed {scenario.schedule.seed}): "
        f"{outcome.result.counts.describe()}\n  timings: {outcome.timings()}",
        *remarks,
        *recoveries,
        sep="\n",
    )
    if outcome.result.ok and not problems:
        return outcome
    paths = save_failure(scenario, outcome.history, outcome.result, tmp_path)
    text = "\n".join([outcome.result.summary(), *problems])
    pytest.fail(f"{text}\n\n{failure_message(scenario, paths)}", pytrace=False)


def stores(usual: str) -> pytest.MarkDecorator:
    """Run a long test on `usual` only, or on every store with STROM_FAULT_ALL_STORES=1 (or
    when STROM_FAULT_REPLAY replays a run on another store), to keep the suite short."""
    replayed = replay_from_env()
    everywhere = os.environ.get("STROM_FAULT_ALL_STORES") == "1" or replayed is not None
    return pytest.mark.parametrize("store", STORES if everywhere else (usual,))


@stores("raft")
def test_kill_every(tmp_path: Path, store: str) -> None:
    """A random node killed with kill -9 and restarted about every 10 s, for 45 s."""
    schedule = kill_every(seconds_from_env(45.0), seed_from_env(1))
    run(scenario("test_kill_every", schedule, store), tmp_path)


@stores("zookeeper")
def test_chase_leader(tmp_path: Path, store: str) -> None:
    """The leader of partition 0 killed four times in a row, each once the last is back."""
    schedule = chase_leader(times=4, partition=0, seed=seed_from_env(2))
    run(scenario("test_chase_leader", schedule, store), tmp_path)


def test_pause_leader(tmp_path: Path, store: str) -> None:
    """The leader of partition 0 stopped (SIGSTOP) for 15 s, well past its 4 s session
    timeout (its ZooKeeper session on that store): it is fenced and replaced, the
    producers move to the new leader, and the old one wakes up believing it still leads."""
    schedule = pause_leader(times=1, partition=0, seed=seed_from_env(3), pause_s=15.0)
    run(scenario("test_pause_leader", schedule, store), tmp_path)


@stores("zookeeper")  # acks=all against the ISR: the same on both stores
def test_majority_down_refuses_acks(tmp_path: Path, store: str) -> None:
    """Both followers of partition 0 killed for 10 s: no acks=all write is acknowledged
    while only its leader is up (the checker's UNDER_MIN_ISR_ACK), writes were attempted
    meanwhile, and every write sent once the nodes are back succeeds."""

    def outage_checks(history: History) -> list[str]:
        changes = [e for e in history.events if isinstance(e, NodeChanged)]
        kills = [c.at_s for c in changes if c.change is NodeChange.KILLED]
        restarts = [c.at_s for c in changes if c.change is NodeChange.RESTARTED]
        readies = [c.at_s for c in changes if c.change is NodeChange.READY]
        if len(kills) < 2 or not restarts or not readies:
            return [f"the schedule did not take two nodes down and back: {changes}"]
        outage = (max(kills[:2]), min(restarts))
        back_s = max(readies)
        sent = [e for e in history.events if isinstance(e, Sent)]
        acked = {e.value for e in history.events if isinstance(e, Acked)}
        during = [e for e in sent if outage[0] <= e.at_s < outage[1] and e.partition == 0]
        after = [e for e in sent if e.at_s > back_s + SETTLE_S]
        refused = [e.value for e in after if e.value not in acked]
        problems = []
        if not during:
            problems.append(f"no write to partition 0 was sent during the outage {outage}")
        if not after or refused:
            problems.append(
                f"{len(refused)} of the {len(after)} writes sent {SETTLE_S:g} s after the "
                f"nodes were back were not acknowledged: {refused[:10]}"
            )
        return problems

    schedule = majority_down(partition=0, seed=seed_from_env(4), down_s=10.0)
    run(scenario("test_majority_down_refuses_acks", schedule, store), tmp_path, outage_checks)
