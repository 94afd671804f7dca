"""The ZooKeeper metadata store (store.py) and its asyncio bridge to kazoo (session.py);
the znode layout itself is the pure codec metadata/znodes.py (with znode_batches.py)."""
