"""The ZooKeeper metadata store (store.py) and its asyncio bridge to kazoo (session.py)."""
