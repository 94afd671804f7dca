"""The embedded metadata store of a single node: the metadata log on local disk.

Records are stored as one record batch per commit in the partition log
`<log.dir>/__cluster_metadata-0`, fsynced before `commit` returns, and replayed in
order at start. It is the single-voter case of the Raft store that replaces it in a
cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from strom.log.config import LogConfig
from strom.log.partition_log import PartitionLog
from strom.log.recovery import log_recovery
from strom.metadata import records as metadata_records
from strom.metadata.image import MetadataImage
from strom.metadata.records import MetadataRecord
from strom.protocol.records import decode_batch, encode_batch, iter_batches, validate_batches

log = logging.getLogger(__name__)

METADATA_LOG_DIR = "__cluster_metadata-0"


class LocalMetadataStore:
    """Opened -> (commit)* -> closed."""

    def __init__(self, log_dir: Path, *, now_ms: int) -> None:
        self._log = PartitionLog.open(
            log_dir / METADATA_LOG_DIR,
            LogConfig(retention_ms=-1, retention_bytes=-1),
            now_ms=now_ms,
        )
        log_recovery(log, "metadata log", self._log.recovery_report)
        self._image = self._replay_all()

    @property
    def image(self) -> MetadataImage:
        return self._image

    def _replay_all(self) -> MetadataImage:
        image = MetadataImage.empty()
        offset = self._log.log_start_offset
        while offset < self._log.log_end_offset:
            chunk = self._log.read(offset, 1 << 20).read_bytes()
            for position, header in iter_batches(chunk):
                _, batch_records = decode_batch(
                    memoryview(chunk)[position : position + header.size_bytes]
                )
                image = image.replay(
                    (metadata_records.decode(r.value or b"") for r in batch_records),
                    offset=header.last_offset,
                )
                offset = header.last_offset + 1
        return image

    async def commit(self, records: Sequence[MetadataRecord], *, now_ms: int) -> MetadataImage:
        if not records:
            return self._image
        batch = encode_batch(
            [(None, metadata_records.encode(r), ()) for r in records],
            base_timestamp_ms=now_ms,
        )
        self._log.append(
            validate_batches(batch, max_batch_bytes=1 << 30), now_ms=now_ms, leader_epoch=0
        )
        self._log.flush()
        self._image = self._image.replay(records, offset=self._log.log_end_offset - 1)
        return self._image

    def close(self) -> None:
        self._log.close(clean=True)
