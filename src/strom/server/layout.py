"""The data directory's identity file, `meta.properties`, as Kafka lays it out.

It ties a directory to one node, and to one cluster once the node has learnt the
cluster id from the controller quorum (the quorum's first leader generates it when the
cluster forms). A node refuses a directory that belongs to another node, and stops when
the quorum's cluster is not the one its directory belongs to.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from strom.durable_files import replace_file

META_PROPERTIES = "meta.properties"


class LayoutError(RuntimeError):
    pass


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_meta_properties(log_dir: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    path = log_dir / META_PROPERTIES
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def check_meta_properties(log_dir: Path, node_id: int) -> str | None:
    """The cluster id `log_dir` belongs to (None while it belongs to none yet).

    Creates the directory and its identity file on first use; refuses a directory that
    holds another node's data.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / META_PROPERTIES
    if not path.exists():
        _write(log_dir, node_id, None)
        return None
    values = read_meta_properties(log_dir)
    found = values.get("node.id")
    if found is not None and found != str(node_id):
        raise LayoutError(
            f"{log_dir} holds the data of node {found}, not node {node_id}: "
            f"start with --node-id {found} or use another data directory"
        )
    return values.get("cluster.id") or None


def record_cluster_id(log_dir: Path, node_id: int, cluster_id: str) -> None:
    """Tie `log_dir` to `cluster_id` once the node has learnt it from the quorum."""
    directory_id = None
    if (log_dir / META_PROPERTIES).exists():
        directory_id = read_meta_properties(log_dir).get("directory.id")
    _write(log_dir, node_id, cluster_id, directory_id)


def _write(
    log_dir: Path, node_id: int, cluster_id: str | None, directory_id: str | None = None
) -> None:
    lines = [
        "# written by strom when this directory was first used",
        "version=1",
        f"node.id={node_id}",
        f"directory.id={directory_id or new_cluster_id()}",
    ]
    if cluster_id is not None:
        lines.append(f"cluster.id={cluster_id}")
    replace_file(log_dir / META_PROPERTIES, ("\n".join(lines) + "\n").encode())
