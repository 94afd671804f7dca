"""What the active controller does with what its metadata store watches (ZooKeeper's
znodes written by hand or by Kafka's tools): the StoreWatches callbacks of
metadata/stores/base.py, each a decision that makes the image hold what the store holds.
`ControllerService` (controller.py) mixes them in; they need only its `decide`, its node id,
its broker config and how it creates topics here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.metadata.acl_records import ResourcePattern
from strom.metadata.client_quotas import replace_entity_quotas
from strom.metadata.configs import ConfigEntryChange, ConfigResourceChange, alter_configs
from strom.metadata.controller import NewTopic, TopicResult
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import ConfigResourceType, MetadataRecord, UserScramCredentialRecord
from strom.metadata.scram_users import replace_user_credentials
from strom.metadata.znode_diff import replace_resource_acls
from strom.security.acls import AclBinding

log = logging.getLogger(__name__)

T = TypeVar("T")

CreateTopicsHere = Callable[[list[NewTopic]], Awaitable[list[TopicResult]]]
"""Topics created by this node's controller (handlers/admin.py: create_here)."""


class StoredMetadataWatches:
    """The StoreWatches callbacks but `on_live_brokers` (liveness is the controller's own)."""

    node_id: int
    _create_topics_here: CreateTopicsHere
    _config: Callable[[], BrokerConfig]

    async def decide(self, fn: Callable[[MetadataImage], tuple[Sequence[MetadataRecord], T]]) -> T:
        raise NotImplementedError  # ControllerService's

    async def adopt_topic(
        self, name: str, assignment: Mapping[int, Sequence[int]], source: str
    ) -> None:
        """A topic written into the store by hand (`source` says so, for the log):
        created with that assignment."""
        results = await self._create_topics_here(
            [NewTopic(name, -1, -1, assignments=dict(assignment))]
        )
        for result in results:
            if result.error_code != ErrorCode.none:
                log.warning(
                    "[node %d] %s cannot be adopted: %s",
                    self.node_id,
                    source,
                    result.error_message or result.error_code.name,
                )

    async def apply_stored_config(
        self, kind: ConfigResourceType, name: str, config: Mapping[str, str], source: str
    ) -> None:
        """A config written into the store (`source` says where, for the log): make the
        image's overrides those stored."""
        change = ConfigResourceChange(
            int(kind), name, [ConfigEntryChange(key, value) for key, value in config.items()]
        )
        broker_config = self._config().raw
        results = await self.decide(
            lambda image: (
                alter_configs(image, [change], incremental=False, broker_config=broker_config)
                if image.configs.get((kind, name), {}) != dict(config)
                else ([], [])
            )
        )
        for result in results:
            if result.error_code != ErrorCode.none:
                log.warning(
                    "[node %d] %s is refused: %s", self.node_id, source, result.error_message
                )

    async def apply_stored_scram(
        self, name: str, credentials: Sequence[UserScramCredentialRecord], source: str
    ) -> None:
        """A user's SCRAM credentials written into the store: make the image's those."""
        await self._take_stored(
            lambda image: replace_user_credentials(image, name, credentials), source
        )

    async def apply_stored_acls(
        self, resource: ResourcePattern, bindings: Sequence[AclBinding], source: str
    ) -> None:
        """A resource's ACL bindings written into the store: make the image's those."""
        await self._take_stored(
            lambda image: replace_resource_acls(image, resource, bindings), source
        )

    async def apply_stored_quotas(
        self, entity: QuotaEntity, quotas: Mapping[str, float], source: str
    ) -> None:
        """A client quota entity's quotas written into the store: make the image's those."""
        await self._take_stored(lambda image: replace_entity_quotas(image, entity, quotas), source)

    async def _take_stored(
        self, records_of: Callable[[MetadataImage], list[MetadataRecord]], source: str
    ) -> None:
        """Commit the records that make the image hold what the store does (none when it
        does already: a change this controller wrote itself costs nothing)."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], bool]:
            records = records_of(image)
            return records, bool(records)

        if await self.decide(decide):
            log.info("[node %d] took the %s", self.node_id, source)
