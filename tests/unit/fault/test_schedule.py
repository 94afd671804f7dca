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


# --- network faults ------------------------------------------------------------------------


def test_network_actions_are_told_apart_from_kills_and_pauses() -> None:
    assert {a for a in Action if a.is_network} == {
        Action.CUT,
        Action.ISOLATE,
        Action.SPLIT,
        Action.BRIDGE,
        Action.FLAP,
    }


def test_cut_leader_cuts_the_leader_for_five_to_fifteen_seconds_each_after_recovery() -> None:
    plan = schedule.cut_leader(times=20, partition=1, seed=4)
    assert plan == schedule.cut_leader(times=20, partition=1, seed=4)
    assert {(f.action, str(f.target), f.after_recovery) for f in plan.faults} == {
        (Action.CUT, "leader:1", True)
    }
    assert all(5.0 <= f.down_s <= 15.0 for f in plan.faults)
    assert all(b.at_s >= a.at_s + a.down_s for a, b in pairwise(plan.faults))
    assert plan.duration_s > plan.faults[-1].at_s + plan.faults[-1].down_s
    assert plan.faults[0].describe().startswith("cut leader of partition 1 from the other nodes")


def test_the_controller_cut_isolates_it_from_zookeeper_too() -> None:
    [fault] = schedule.cut_controller(seed=1).faults
    assert (fault.action, str(fault.target), fault.down_s) == (Action.ISOLATE, "controller", 8.0)
    assert fault.describe() == (
        "isolate active controller from the other nodes and ZooKeeper for 8 s"
    )


def test_splits_put_zookeeper_with_the_two_then_with_the_lone_node() -> None:
    plan = schedule.split_one_two(times=4, seed=2)
    assert [f.action for f in plan.faults] == [Action.ISOLATE, Action.SPLIT] * 2
    assert {str(f.target) for f in plan.faults} == {"random"}


def test_a_bridge_runs_through_a_follower_and_flapping_is_one_long_fault() -> None:
    [bridge] = schedule.bridge(partition=2).faults
    assert (bridge.action, str(bridge.target)) == (Action.BRIDGE, "follower:2")
    [flap] = schedule.flapping(30.0, seed=3).faults
    assert (flap.action, flap.down_s) == (Action.FLAP, 30.0)
    assert flap.describe() == "flap the network for 30 s"
    assert schedule.FLAP_STEP_S == (1.0, 4.0)


def test_cut_and_kill_kills_a_node_while_the_network_is_cut() -> None:
    plan = schedule.cut_and_kill(seed=6)
    assert plan == schedule.cut_and_kill(seed=6)
    cut, kill, flap, second_kill = plan.faults
    assert cut.action is Action.CUT and flap.action is Action.FLAP
    assert kill.action is second_kill.action is Action.KILL
    assert cut.at_s < kill.at_s < cut.at_s + cut.down_s
    assert flap.at_s < second_kill.at_s < flap.at_s + flap.down_s
    assert not kill.after_recovery and not second_kill.after_recovery


def test_the_network_soak_repeats_for_a_seed_and_uses_every_kind_of_fault() -> None:
    plan = schedule.network_mixed(1800, 7)
    assert plan == schedule.network_mixed(1800, 7)
    assert {f.action for f in plan.faults} == set(Action) - {Action.PAUSE}
    assert all(f.at_s < 1800 for f in plan.faults)


def test_a_network_schedule_survives_json() -> None:
    for plan in (schedule.network_mixed(600, 3), schedule.cut_and_kill(seed=1)):
        assert schedule.from_json(schedule.to_json(plan)) == plan
