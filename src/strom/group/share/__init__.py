"""KIP-932 share groups' membership: the broker assigns, and partitions may be shared.

`records.py`: their records in `__consumer_offsets`; `state.py`: groups and members and
the replay of records; `assignor.py`: the `simple` assignor; `heartbeat.py`: one
ShareGroupHeartbeat's decision and ShareGroupDescribe's view; `initialize.py`: which
share-partitions are initialized and may be assigned; `namespace.py`: what a
request gets when a group id is taken by another group type; `coordinator.py`: the
groups of one partition, committed and pending writes, and session timeouts. Pure: no
I/O, no clock. The share-partitions themselves are `strom.share`.
"""
