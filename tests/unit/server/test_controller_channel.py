"""The channel to the active controller drops its connections to former controllers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.server.controller_channel import ControllerChannel


class _Connection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_new_controller_closes_the_connections_to_the_others() -> None:
    """A heartbeat in flight to a controller cut off from the network would wait out its
    whole timeout while the new controller fences the broker; closing the connection
    fails it at once, and the next one goes to the new controller."""
    store = SimpleNamespace(leader_id=1)
    broker: Any = SimpleNamespace(store=store, fetcher=None)
    channel = ControllerChannel(broker)
    old, new = _Connection(), _Connection()
    channel._connections.update({1: old, 2: new})  # type: ignore[dict-item]
    store.leader_id = 2
    channel.leader_changed()
    assert old.closed and not new.closed
    assert list(channel._connections) == [2]
