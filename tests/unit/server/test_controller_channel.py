"""The channel to the active controller drops its connections to former controllers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from strom.config import load_config
from strom.server.controller_channel import ControllerChannel


class _Connection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_new_controller_closes_the_connections_to_the_others(tmp_path: Path) -> None:
    """A heartbeat in flight to a controller cut off from the network would wait out its
    whole timeout while the new controller fences the broker; closing the connection
    fails it at once, and the next one goes to the new controller."""
    store = SimpleNamespace(leader_id=1, controller_endpoint=lambda _node_id: None)
    config = load_config(overrides=["node.id=3", f"log.dirs={tmp_path}"])
    channel = ControllerChannel(
        node_id=3,
        config=lambda: config,
        store=lambda: store,
        fetcher=lambda: None,
        controller=lambda: None,
    )
    old, new = _Connection(), _Connection()
    channel._connections.update({1: old, 2: new})  # type: ignore[dict-item]
    store.leader_id = 2
    channel.leader_changed()
    assert old.closed and not new.closed
    assert list(channel._connections) == [2]
