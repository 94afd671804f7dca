"""Producer id blocks (server/producer_ids.py): what is asked of the controller, how a
block is used up, and what happens when the controller refuses or is not there.

The retry pause and the allocation deadline are set to zero where a test needs them, so
nothing waits on the clock."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from controller_fakes import ScriptedController
from kio.schema.errors import ErrorCode
from server_harness import run

from strom.protocol.apis import ApiKey
from strom.server import producer_ids
from strom.server.controller import NotController
from strom.server.producer_ids import ProducerIdBlocks, ProducerIdsUnavailable

NODE_ID = 1
BROKER_EPOCH = 42


def block(first: int, count: int, error: ErrorCode = ErrorCode.none) -> Mapping[str, Any]:
    """An AllocateProducerIds response's fields."""
    return {
        "throttle_time": 0,
        "error_code": error,
        "producer_id_start": first,
        "producer_id_len": count,
    }


def blocks(
    *script: Mapping[str, Any] | Exception, epoch: int | None = BROKER_EPOCH
) -> tuple[ProducerIdBlocks, ScriptedController]:
    controller = ScriptedController(list(script))
    return (
        ProducerIdBlocks(node_id=NODE_ID, broker_epoch=lambda: epoch, controller=controller),
        controller,
    )


@pytest.fixture
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_ids, "RETRY_S", 0)


def test_ids_come_from_one_block_until_it_is_used_up() -> None:
    ids, controller = blocks(block(1000, 3), block(5000, 2))

    async def scenario() -> list[int]:
        return [await ids.next_id() for _ in range(5)]

    assert run(scenario()) == [1000, 1001, 1002, 5000, 5001]
    assert len(controller.calls) == 2, "a second block only once the first is used up"
    call = controller.calls[0]
    assert (call.api_key, call.api_version, call.timeout_s) == (
        ApiKey.ALLOCATE_PRODUCER_IDS,
        0,
        5.0,
    )
    assert call.body == {"broker_id": NODE_ID, "broker_epoch": BROKER_EPOCH}
    assert call.here is not None, "this node's own controller is asked in process"


@pytest.mark.usefixtures("no_pause")
def test_a_refused_block_is_logged_and_asked_for_again(caplog: pytest.LogCaptureFixture) -> None:
    ids, controller = blocks(block(-1, 0, ErrorCode.stale_broker_epoch), block(7000, 10))
    with caplog.at_level(logging.INFO, logger="strom.server.producer_ids"):
        assert run(ids.next_id()) == 7000
    assert len(controller.calls) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "[node 1] producer id block refused: stale_broker_epoch",
        "[node 1] producer ids 7000..7009 from the controller",
    ]


@pytest.mark.usefixtures("no_pause")
def test_no_active_controller_is_waited_out_quietly(caplog: pytest.LogCaptureFixture) -> None:
    ids, controller = blocks(
        NotController(None), block(-1, 0, ErrorCode.not_controller), block(300, 1)
    )
    with caplog.at_level(logging.INFO, logger="strom.server.producer_ids"):
        assert run(ids.next_id()) == 300
    assert len(controller.calls) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "[node 1] producer ids 300..300 from the controller"
    ], "NOT_CONTROLLER is no refusal: the broker looks for the controller again"


@pytest.mark.usefixtures("no_pause")
def test_refusals_past_the_deadline_make_ids_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_ids, "ALLOCATE_TIMEOUT_S", 0)
    ids, controller = blocks(block(-1, 0, ErrorCode.unknown_server_error))
    with pytest.raises(ProducerIdsUnavailable):
        run(ids.next_id())
    assert len(controller.calls) == 1


@pytest.mark.usefixtures("no_pause")
def test_an_unregistered_broker_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a broker epoch (not registered yet) there is nothing to ask with."""
    monkeypatch.setattr(producer_ids, "ALLOCATE_TIMEOUT_S", 0)
    ids, controller = blocks(epoch=None)
    with pytest.raises(ProducerIdsUnavailable):
        run(ids.next_id())
    assert controller.calls == []


def test_the_local_controller_is_asked_for_this_broker_and_epoch() -> None:
    """The in-process path: `here` asks this node's controller service directly."""
    ids, controller = blocks(block(0, 1))
    run(ids.next_id())
    here = controller.calls[0].here
    assert here is not None
    asked: list[tuple[int, int]] = []

    class Local:
        async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> Any:
            asked.append((broker_id, broker_epoch))
            return "the controller's result"

    assert run(here(Local())) == "the controller's result"  # type: ignore[arg-type]
    assert asked == [(NODE_ID, BROKER_EPOCH)]
