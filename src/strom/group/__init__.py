"""Consumer groups: the classic group protocol and committed offsets, as pure code.

`coordinator` runs membership (join, sync, heartbeat, leave, timers), with the steps of a
rebalance in `rebalance` and its request and output values in `requests`; `offsets` runs
commits, fetches, deletions and expiry; `txn_offsets` transactional offsets (pending
until their producer's marker) and require_stable fetches; `records` is the byte layout of both in
`__consumer_offsets`; `placement` maps a group to its partition of that topic.
"""
