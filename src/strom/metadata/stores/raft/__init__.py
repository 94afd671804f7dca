"""The built-in Raft quorum as a metadata store: the pure core of `strom.raft` on the
event loop, its persistence in worker threads and its peers (driver.py)."""
