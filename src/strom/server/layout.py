"""The data directory's identity file, `meta.properties`, as Kafka lays it out.

It ties a directory to one cluster and one node: the cluster id is generated when the
first node starts on an empty directory, and a node refuses a directory that belongs to
another node.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

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


def ensure_meta_properties(log_dir: Path, node_id: int) -> str:
    """The cluster id of `log_dir`, creating the directory and its identity if new."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / META_PROPERTIES
    if path.exists():
        values = read_meta_properties(log_dir)
        found = values.get("node.id")
        if found is not None and found != str(node_id):
            raise LayoutError(
                f"{log_dir} holds the data of node {found}, not node {node_id}: "
                f"start with --node-id {found} or use another data directory"
            )
        cluster_id = values.get("cluster.id")
        if not cluster_id:
            raise LayoutError(f"{path} has no cluster.id; the directory is damaged")
        return cluster_id
    cluster_id = new_cluster_id()
    text = (
        "# written by strom when this directory was first used\n"
        f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
        f"directory.id={new_cluster_id()}\n"
    )
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    dir_fd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return cluster_id
