"""The timing and size settings of a Raft node."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RaftConfig"]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000  # randomized per election in [T, 2T) with the node's rng
    heartbeat_interval_ms: int = 100  # the leader sends (empty) appends this often
    max_append_bytes: int = 1 << 20  # entry data per AppendRequest (at least one entry)
    check_quorum_ms: int | None = None
    """How long a leader that hears from no majority keeps leading (None: one election
    timeout). Brokers set 1.5 x controller.quorum.fetch.timeout.ms, as Kafka does, so a
    busy follower's pause of a second or two does not cost the controller."""

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_ms < self.election_timeout_ms:
            raise ValueError("need 0 < heartbeat_interval_ms < election_timeout_ms")
        if self.max_append_bytes <= 0:
            raise ValueError("max_append_bytes must be positive")
        if self.check_quorum_ms is not None and self.check_quorum_ms < self.election_timeout_ms:
            raise ValueError("check_quorum_ms must be at least election_timeout_ms")
