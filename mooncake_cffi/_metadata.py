"""Removing a client's entries from Mooncake's HTTP metadata server."""

from __future__ import annotations


def forget_client(metadata_server: str, hostname: str) -> None:
    """Delete the metadata entries the client ``hostname`` registered (best effort)."""
    # Filled in with the real key layout of the metadata server.
    return None
