"""Whether a node is ready for traffic: the answer of /ready, decided from a snapshot."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeState:
    """What /ready looks at, read off the node when asked."""

    is_broker: bool
    is_controller: bool
    stopping: bool
    failed: str | None
    """The reason the node is stopping after a fatal error; None if it has none."""
    cluster_formed: bool
    """The node knows the cluster id from the committed metadata."""
    registered: bool
    """A broker: the controller accepted its registration (it has a broker epoch)."""
    unfenced: bool
    """A broker: the controller unfenced it, so it has replayed the metadata up to its
    own registration."""
    serving: bool
    """A broker: its partitions are open and its client listeners accept connections."""
    metadata_leader_known: bool
    """A controller: the quorum (or ZooKeeper) names an active controller."""


def readiness(state: NodeState) -> tuple[bool, str]:
    """(ready, why): ready once the node does everything its roles promise."""
    if state.failed is not None:
        return False, f"failed: {state.failed}"
    if state.stopping:
        return False, "shutting down"
    if not state.cluster_formed:
        return False, "waiting for the metadata quorum to form the cluster"
    if state.is_controller and not state.metadata_leader_known:
        return False, "no active controller is known"
    if state.is_broker:
        if not state.registered:
            return False, "not registered with the controller yet"
        if not state.unfenced:
            return False, "registered, but fenced: catching up with the metadata"
        if not state.serving:
            return False, "unfenced, opening partitions"
    return True, "ready"
