"""Fault schedules: seeded generators give the same schedule for the same seed, and a
schedule survives the JSON a failing run is saved as. No sockets, no sleeps."""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/, where the fault package is

from fault import schedule
from fault.schedule import Action, Target, TargetKind


def test_a_seed_gives_one_schedule_and_another_seed_another() -> None:
    assert schedule.kill_every(60, 1) == schedule.kill_every(60, 1)
    assert schedule.kill_every(60, 1) != schedule.kill_every(60, 2)
    assert schedule.mixed(300, 7) == schedule.mixed(300, 7)


def test_kill_every_kills_a_node_about_every_ten_seconds_within_the_run() -> None:
    plan = schedule.kill_every(60, 3)
    times = [fault.at_s for fault in plan.faults]
    assert 5 <= len(times) <= 7 and times[0] == 5.0 and times[-1] < 60
    assert all(8.0 <= b - a <= 12.0 for a, b in pairwise(times))
    for fault in plan.faults:
        assert fault.action is Action.KILL and fault.after_recovery
        assert fault.target.kind is TargetKind.NODE and fault.target.node in (1, 2, 3)
        assert 2.0 <= fault.down_s <= 7.0
    assert {fault.target.node for fault in schedule.kill_every(600, 3).faults} == {1, 2, 3}


def test_chase_and_pause_aim_at_the_leader_each_after_recovery() -> None:
    chase = schedule.chase_leader(times=5, partition=2)
    assert len(chase.faults) == 5
    assert {(f.action, str(f.target), f.after_recovery) for f in chase.faults} == {
        (Action.KILL, "leader:2", True)
    }
    pause = schedule.pause_leader(partition=0, pause_s=15.0)
    assert [(f.action, str(f.target), f.down_s) for f in pause.faults] == [
        (Action.PAUSE, "leader:0", 15.0)
    ]
    assert pause.duration_s > pause.faults[0].at_s + 15.0


def test_majority_down_kills_both_followers_at_once() -> None:
    plan = schedule.majority_down(partition=1, down_s=10.0)
    assert [(f.at_s, str(f.target), f.down_s) for f in plan.faults] == [
        (4.0, "follower:1", 10.0),
        (4.0, "follower:1", 10.0),
    ]


@pytest.mark.parametrize("text", ["3", "leader:0", "follower:2", "controller", "random"])
def test_a_target_reads_back_from_its_text(text: str) -> None:
    assert str(Target.parse(text)) == text


def test_a_schedule_survives_json() -> None:
    for plan in (schedule.mixed(120, 5), schedule.chase_leader(), schedule.majority_down()):
        assert schedule.from_json(schedule.to_json(plan)) == plan
    assert "kill leader of partition 0 for 6 s (after recovery)" in (
        schedule.chase_leader().describe()
    )
