"""Share groups (KIP-932): the pure state of a share-partition, with strom's delayed
delivery, and its records in `__share_group_state`. docs/share-groups.md."""
