"""Kafka broker keys strom accepts so that Kafka's shipped `server.properties` files start
strom unchanged, but that change nothing (thread pools, socket buffers);
the broker lists the ones a config sets when it starts."""

from __future__ import annotations

from strom.config.schema import ConfigKey, ConfigType

INT = ConfigType.INT
BOOLEAN = ConfigType.BOOLEAN


def _ignored(name: str, type_: ConfigType, default: str | None, doc: str) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, None, effect=False)


KAFKA_ONLY_KEYS: tuple[ConfigKey, ...] = (
    _ignored(
        "num.network.threads", INT, "3", "Kafka's network threads; strom uses one event loop."
    ),
    _ignored("num.io.threads", INT, "8", "Kafka's request threads; strom uses one event loop."),
    _ignored("num.recovery.threads.per.data.dir", INT, "1", "Kafka's log recovery threads."),
    _ignored("num.replica.fetchers", INT, "1", "Kafka's replica fetcher threads."),
    _ignored("background.threads", INT, "10", "Kafka's background task threads."),
    _ignored("queued.max.requests", INT, "500", "Kafka's request queue length."),
    _ignored("socket.send.buffer.bytes", INT, "102400", "Kafka's SO_SNDBUF for client sockets."),
    _ignored("socket.receive.buffer.bytes", INT, "102400", "Kafka's SO_RCVBUF for client sockets."),
    _ignored("socket.listen.backlog.size", INT, "50", "Kafka's listen backlog."),
    _ignored("fetch.max.bytes", INT, "57671680", "Kafka's limit on a fetch response."),
    _ignored("controlled.shutdown.enable", BOOLEAN, "true", "Kafka's controlled shutdown."),
    _ignored("log.preallocate", BOOLEAN, "false", "Kafka's segment file preallocation."),
    _ignored("offsets.commit.timeout.ms", INT, "5000", "Kafka's offset commit timeout."),
)
