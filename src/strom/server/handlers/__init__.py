"""One handler per Kafka API: `async (broker, request) -> response body | None`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers import admin, cluster, configs, coordinator, fetch, produce

if TYPE_CHECKING:
    from strom.server.broker import Broker

Handler = Callable[["Broker", Request], Awaitable[Any | None]]

HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.INIT_PRODUCER_ID: produce.handle_init_producer_id,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: fetch.handle_list_offsets,
    ApiKey.METADATA: cluster.handle_metadata,
    ApiKey.FIND_COORDINATOR: coordinator.handle_find_coordinator,
    ApiKey.API_VERSIONS: cluster.handle_api_versions,
    ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    ApiKey.CREATE_TOPICS: admin.handle_create_topics,
    ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
}
