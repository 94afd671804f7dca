"""/ready: when a node says it is ready, and what it says when it is not."""

from __future__ import annotations

from dataclasses import replace

from strom.metrics.health import NodeState, readiness

READY = NodeState(
    is_broker=True,
    is_controller=True,
    stopping=False,
    failed=None,
    cluster_formed=True,
    registered=True,
    unfenced=True,
    serving=True,
    metadata_leader_known=True,
)


def test_a_combined_node_doing_everything_is_ready() -> None:
    assert readiness(READY) == (True, "ready")


def test_each_missing_step_says_what_is_missing_first() -> None:
    cases = [
        (replace(READY, cluster_formed=False, registered=False), "form the cluster"),
        (replace(READY, metadata_leader_known=False), "no active controller"),
        (replace(READY, registered=False, unfenced=False, serving=False), "not registered"),
        (replace(READY, unfenced=False, serving=False), "fenced"),
        (replace(READY, serving=False), "opening partitions"),
        (replace(READY, stopping=True), "shutting down"),
        (replace(READY, failed="disk full", stopping=True), "failed: disk full"),
    ]
    for state, reason in cases:
        ready, why = readiness(state)
        assert not ready and reason in why, (state, why)


def test_a_controller_only_node_needs_no_registration() -> None:
    controller = replace(READY, is_broker=False, registered=False, unfenced=False, serving=False)
    assert readiness(controller) == (True, "ready")
    assert not readiness(replace(controller, metadata_leader_known=False))[0]


def test_a_broker_only_node_needs_no_quorum_leader_of_its_own() -> None:
    broker = replace(READY, is_controller=False, metadata_leader_known=False)
    assert readiness(broker) == (True, "ready")
