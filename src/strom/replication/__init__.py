"""Partition replication, the pure parts: what a leader tracks of its followers
(`leader`), and where a follower's log diverged from its leader's (`follower`). The
server drives them (server/replica_fetcher.py, server/partitions.py)."""
