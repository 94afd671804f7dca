"""The Raft core (pure), its messages, its on-disk storage and its wire encoding."""
