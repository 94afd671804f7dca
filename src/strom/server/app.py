"""`strom serve`: run one broker until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

from strom.config import BrokerConfig
from strom.server.broker import Broker, FatalError, ListenError
from strom.server.layout import LayoutError

log = logging.getLogger(__name__)


async def _serve(config: BrokerConfig) -> int:
    started = time.monotonic()
    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await broker.start()
    except (LayoutError, ListenError, FatalError) as exc:
        print(f"strom: {exc}", file=sys.stderr)
        await broker.stop()
        return 1
    for key in config.ignored:
        log.info(
            "[node %d] config key %s is accepted but has no effect in strom", config.node_id, key
        )
    bound = ", ".join(f"{listener.host}:{port}" for listener, port in broker.bound)
    roles = "+".join(sorted(role.value for role in config.process_roles))
    where = "controller" if not broker.is_broker else "{}:{}".format(*broker.advertised_listener)
    endpoint = broker.observability.endpoint
    metrics = "" if endpoint is None else f"; metrics on port {endpoint.port}"
    print(
        f"strom ready on {where} (listening on {bound}; node {config.node_id} as {roles}, "
        f"cluster {broker.cluster_id}, data in {config.log_dir}{metrics}) "
        f"after {1000 * (time.monotonic() - started):.0f} ms",
        flush=True,
    )
    fatal_wait = asyncio.ensure_future(broker.fatal.wait())
    stop_wait = asyncio.ensure_future(stop.wait())
    await asyncio.wait({fatal_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    fatal_wait.cancel()
    stop_wait.cancel()
    if broker.fatal.is_set():
        print(f"strom: {broker.fatal_reason}", file=sys.stderr)
        await broker.stop()
        return 1
    log.info("[node %d] shutting down", config.node_id)
    stopping = time.monotonic()
    await broker.stop()
    log.info(
        "[node %d] stopped cleanly in %.0f ms", config.node_id, 1000 * (time.monotonic() - stopping)
    )
    return 0


def run_server(config: BrokerConfig) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(_serve(config))
    return uvloop.run(_serve(config))
