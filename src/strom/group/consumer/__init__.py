"""KIP-848 consumer groups (`group.protocol=consumer`): the broker assigns.

`records.py`: their records in `__consumer_offsets`; `state.py`: groups and members and
the replay of records; `assignors.py`: the `uniform` and `range` server assignors;
`reconcile.py`: a member's way to its target assignment; `heartbeat.py`: one
ConsumerGroupHeartbeat's decision; `coordinator.py`: the groups of one partition,
committed and pending writes, and the timers. Pure: no I/O, no clock, no global random.
"""
