"""Fetch sessions (KIP-227): the broker's cache of sessions (sessions.py) and a
fetcher's side of one session (fetcher_session.py). Pure: requests and answers in,
decisions out."""
