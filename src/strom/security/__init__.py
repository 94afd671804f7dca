"""Listener security: TLS contexts and client principals."""
