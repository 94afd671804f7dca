"""Which brokers the controller lets take their preferred leaderships back: those that
have stayed unfenced for a whole leader.imbalance.check.interval.seconds."""

from __future__ import annotations

import uuid
from pathlib import Path

from quorum_harness import cluster
from server_harness import run

from strom.metadata import brokers
from strom.metadata.records import RegisterBrokerRecord
from strom.metadata.stores.memory import MemoryLog

INTERVAL_MS = 2_000


def test_a_broker_is_settled_once_it_has_stayed_live_for_an_interval(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        controller = one.controller
        assert controller is not None
        await controller.commit(
            [
                RegisterBrokerRecord(b, uuid.UUID(int=b), "localhost", 9000 + b, None, fenced=False)
                for b in (2, 3)
            ]
        )
        image = one.metadata.image
        assert controller.settled_brokers(image, 10_000, INTERVAL_MS) == set()  # first seen
        assert controller.settled_brokers(image, 11_999, INTERVAL_MS) == set()
        assert controller.settled_brokers(image, 12_000, INTERVAL_MS) >= {2, 3}
        # Broker 3 is fenced and comes back: it counts again from its return.
        fenced = image.replay(brokers.fence_brokers(image, [3], unclean=lambda _t, _p: False))
        assert 3 not in controller.settled_brokers(fenced, 13_000, INTERVAL_MS)
        assert controller.settled_brokers(image, 14_000, INTERVAL_MS) >= {2}
        assert 3 not in controller.settled_brokers(image, 15_999, INTERVAL_MS)
        assert 3 in controller.settled_brokers(image, 16_000, INTERVAL_MS)

    run(scenario())
